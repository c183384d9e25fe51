"""rnic.hdl"""
