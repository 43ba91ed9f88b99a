"""Training on top of the collectives: DistributedTrainer (trainer) and
DistributedOptimizer (optimizer), kvstore="mxplugin" (kvstore), gradient
buckets and groups (buckets), the fused bucket updates (native_update),
sharded optimizer states (sharding), and gradient compression (compression,
with PowerSGD's reduction in powersgd)."""
