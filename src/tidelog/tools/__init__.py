"""tidelog.tools"""
