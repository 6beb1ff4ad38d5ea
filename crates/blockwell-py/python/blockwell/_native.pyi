"""Type stubs of the Rust extension module (see blockwell/__init__.py for the documented API)."""

from typing import Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

class TraceError(ValueError): ...

class TraceBatches:
    def __iter__(self) -> Iterator[Dict[str, np.ndarray]]: ...
    def __next__(self) -> Dict[str, np.ndarray]: ...
    @property
    def volumes(self) -> List[str]: ...
    @property
    def skipped_lines(self) -> int: ...

def read_trace(
    path: str,
    format: Optional[str] = None,
    *,
    skip_bad_lines: int = 0,
    object_size: str = "4096",
    csv_columns: Optional[str] = None,
    batch_size: int = 65536,
) -> TraceBatches: ...
def sim(
    trace: str,
    policies_: List[str],
    caches: List[str],
    *,
    format: Optional[str] = None,
    block_size: int = 4096,
    preset_: str = "default",
    prefetch: str = "none",
    admission_: str = "always",
    sequential_cutoff: str = "0",
    associativity: Optional[int] = None,
    reads_only: bool = False,
    warmup: str = "0",
    volumes: Optional[List[str]] = None,
    threads: int = 0,
    skip_bad_lines: int = 0,
    object_size: str = "4096",
    csv_columns: Optional[str] = None,
    interval: int = 0,
) -> str: ...
def sim_columns() -> List[str]: ...
def interval_columns() -> List[str]: ...

def mrc(
    trace: str,
    *,
    sizes: Optional[List[str]] = None,
    points: int = 20,
    block_size: int = 4096,
    reads_only: bool = False,
    sample: Optional[float] = None,
    shards_max: Optional[int] = None,
    format: Optional[str] = None,
    skip_bad_lines: int = 0,
    object_size: str = "4096",
    csv_columns: Optional[str] = None,
) -> str: ...
def mrc_policies(
    trace: str,
    policies_: List[str],
    *,
    sizes: Optional[List[str]] = None,
    points: int = 20,
    sample: float = 1.0,
    block_size: int = 4096,
    reads_only: bool = False,
    preset_: str = "default",
    threads: int = 0,
    format: Optional[str] = None,
    skip_bad_lines: int = 0,
    object_size: str = "4096",
    csv_columns: Optional[str] = None,
) -> str: ...
def trace_stats(
    trace: str,
    *,
    block_size: int = 4096,
    reuse: bool = True,
    format: Optional[str] = None,
    skip_bad_lines: int = 0,
    object_size: str = "4096",
    csv_columns: Optional[str] = None,
) -> str: ...

def experiment(
    name: str,
    options_json: str,
    traces: List[str] = ...,
    *,
    format: Optional[str] = None,
    skip_bad_lines: int = 0,
    object_size: str = "4096",
    csv_columns: Optional[str] = None,
    limit: Optional[int] = None,
) -> List[Tuple[str, str]]: ...

class Cache:
    def __init__(
        self,
        policy: object,
        size: str,
        *,
        block_size: int = 4096,
        preset_: str = "default",
        prefetch: str = "none",
        admission_: str = "always",
        sequential_cutoff: str = "0",
    ) -> None: ...
    def access(self, op: Union[str, int], offset: int, length: int, volume: int = 0) -> Tuple[int, int]: ...
    def access_many(
        self,
        op: npt.NDArray[np.uint8],
        offset: npt.NDArray[np.uint64],
        length: npt.NDArray[np.uint64],
        volume: Optional[npt.NDArray[np.uint32]] = None,
    ) -> Tuple[int, int]: ...
    @property
    def stats(self) -> str: ...
    @property
    def capacity(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def policy(self) -> str: ...
    def reset_stats(self) -> None: ...
    def __len__(self) -> int: ...
