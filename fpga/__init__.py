"""rnic.fpga"""
