"""rnic.model"""
