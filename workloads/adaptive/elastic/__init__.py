"""Elastic workers: a running group that survives a worker's death and admits new workers,
re-forming its process group in place, with the state sent from a surviving worker.

- membership.py: generations and how one follows another (pure);
- rendezvous.py: their records in the launcher's store, and heartbeats;
- group.py: ElasticGroup (start, grow, recover) and ElasticPolicy (admit joiners);
- transfer.py: the training state broadcast from one rank, without pickle.
docs/adaptive-elastic.md: the design, its costs, and how it maps onto Kubernetes.
"""
