"""More than one GPU: tensor parallelism (one rank's shard, its collectives) and data-parallel replicas and PD
disaggregation (``--dp``, ``--disagg XPYD``, the KV link)."""
