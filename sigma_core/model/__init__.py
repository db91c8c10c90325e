"""Model: what a network is. Layers (forward passes only), architectures and constructs, the network, parameter
initialisers, and loading a saved network (``load``)."""
