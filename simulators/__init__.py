"""The simulated site: a Kubernetes-compatible API with DPF and Grove controllers, and Redfish BMCs.

A separate program that speaks only HTTP; it imports nothing of the product.
"""
