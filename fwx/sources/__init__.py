"""Loading any source model safely and reading its signature as data.

Used by the exporter (what to export), the validators (the reference to
compare against) and ``fwx inspect``; imports only runtimes and the core.
"""
