"""The recipe double: lab hosts that meet sparkgate where the recipe's DGX Sparks would.

A docker lab (namespace hosts, each with its own dockerd) becomes three "Sparks":
- each host has a home folder under the lab with the recipe's paths in it: the HF-cache snapshot
  of the pinned checkpoint (a bundled-engine model made with `make-model`), the display device's
  by-path node (a plain file standing in for the GB10's DRM card) and `/dev/infiniband`'s
  stand-in, and a `uname`/`getconf` that answer as the recipe's preflight expects;
- the head holds a git checkout of the double's recipe (`checkout.py`): `bin/spark`
  (`spark_double.py`), `config/cluster.json`, a lock naming the base image, and `docker/` with the
  image's Dockerfile, its entry point `vllm` (`vllm_double.py`) and the tests tree;
- the hosts' dockerds find the double's `runc` first on their PATH (`runc_memlock.py`): it lowers
  the recipe's unlimited memlock to what this machine allows and logs each lowering;
- the image (`image/Dockerfile`) runs as root on top of the bundled engine's image, with the
  tests at /opt/spark3/candidate/vllm and `vllm serve` as its entry point;
- the example clusters' probes are answered by `nvidia-smi`, `cat` and `grep` first on the
  sessions' PATH (`spark_probes.py`), from per-host Spark files a test changes while an arm is
  sampled (`spark_host.py`): the GPU's query, the APST timeouts and the RDMA hw_counters.
"""
