"""System models: chips, instances, servers and clusters, their topologies and collectives."""
