"""markov-replicate: replication harness for transformers trained on Markov chains."""
