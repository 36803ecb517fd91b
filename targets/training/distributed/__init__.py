"""The reference trainer across processes (torch.distributed: gloo on CPU, NCCL on GPUs).

layout.py     how ranks split the work: expert, pipeline and data parallel groups
comm.py       the timed collectives: all-to-all (autograd), pipeline send/recv, all-reduce
ep_moe.py     an MoE layer whose experts live on several ranks (dispatch / combine)
stage.py      one pipeline stage of the tiny MoE
shards.py     sharded checkpoints, written atomically, complete only when every rank's is
worker.py     one rank: ``python -m moeperf.targets.training.distributed.worker CONFIG`` (torchrun's
              environment contract: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
launcher.py   starts the ranks, watches them, kills one on request, restarts the job
"""
