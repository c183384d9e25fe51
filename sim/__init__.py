"""rnic.sim"""
