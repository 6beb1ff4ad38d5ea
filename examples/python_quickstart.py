# %% [markdown]
# # Blockwell from Python
#
# A notebook-style tour (each `# %%` is a cell; VS Code and Jupytext open it as a notebook). Run it whole with
# `python examples/python_quickstart.py [TRACE] [OUT_DIR]`; the test suite does, on the CloudPhysics trace.

# %%
import collections
import os
import sys
import tempfile

import blockwell

trace = sys.argv[1] if len(sys.argv) > 1 else "../shared/traces/cloudphysics/cloudPhysicsIO.csv"
out = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()

# %% [markdown]
# ## Five lines: a trace through two policies at three sizes

# %%
df = blockwell.sim(trace, policies=["lru", "arc"], cache=["1%", "5%", "10%"])
print(df[["policy", "cache_blocks", "block_miss_ratio", "request_miss_ratio"]])

# %% [markdown]
# ## The trace itself, as a DataFrame

# %%
requests = blockwell.read_trace(trace).to_pandas()
print(requests.groupby("op", observed=True)["len"].describe())
stats = blockwell.trace_stats(trace)
print("footprint", stats["footprint_blocks"], "blocks")

# %% [markdown]
# ## The LRU miss-ratio curve in one pass, and the policies on it

# %%
curve = blockwell.mrc(trace, points=30)
ax = blockwell.plot.mrc(curve)
blockwell.plot.policies(df, ax=ax)
ax.figure.savefig(os.path.join(out, "mrc.png"), dpi=100)

# %% [markdown]
# ## A policy written in Python
#
# Four hooks; the engine keeps the resident set and checks every decision. This one is LRU, so its numbers equal
# the engine's.


# %%
class MyLRU(blockwell.PolicyHooks):
    def __init__(self, capacity):
        super().__init__(capacity)
        self.order = collections.OrderedDict()

    def access(self, key):
        self.order.move_to_end(key)

    def insert(self, key, prefetched):
        self.order[key] = None

    def evict(self):
        return self.order.popitem(last=False)[0]

    def remove(self, key):
        del self.order[key]


mine = blockwell.sim(trace, policies=["lru", MyLRU], cache=["1%"])
print(mine[["policy", "block_misses"]])
assert mine["block_misses"].nunique() == 1

# %% [markdown]
# ## Step by step

# %%
cache = blockwell.Cache("arc", "64MiB", prefetch="linux26")
for batch in blockwell.read_trace(trace):
    cache.access_many(batch["op"], batch["offset"], batch["len"], batch["volume"])
print(cache, cache.stats["evictions"], "evictions")

# %% [markdown]
# ## A sweep: every trace of a directory x policies x sizes, on local processes
# (pass `client=dask.distributed.Client(...)` to run it on a cluster)

# %%
sweep = blockwell.sweep([trace], ["lru", "arc", "s3fifo"], ["1%", "10%"], out_dir=os.path.join(out, "sweep"))
print(sweep.pivot_table(index="policy", columns="cache_blocks", values="block_miss_ratio"))

# %% [markdown]
# ## A seed paper's experiment: eight policies with and without Linux read-ahead (seed 001, reduced grid)

# %%
from blockwell import experiments

pp = experiments.prefetch_policies(quick=True, workload="loop(files=200)")
print(pp.pivot_table(index="policy", columns=["prefetch", "cache_blocks"], values="hit_ratio").round(3))
