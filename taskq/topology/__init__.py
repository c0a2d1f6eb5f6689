"""Topology: the names of every JetStream object and subject, the specs they are created
from, and how a queue's partitions are laid out."""
