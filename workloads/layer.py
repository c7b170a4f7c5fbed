"""`Layer`: one operator as the 7-loop nest (R, S, P, Q, C, K, N) an accelerator maps.

The convention is Timeloop's `cnn-layer` (and DOSA's): R, S filter height/width; P, Q output
height/width; C input channels; K output channels; N batch. Every other operator kind is a conv
in disguise:

* GEMM ``(M x K_red) @ (K_red x N_out)`` is a conv with R=S=Q=1, P=M, C=K_red, K=N_out, and a
  batched GEMM puts its batch in N;
* GEMV is a GEMM with N=P=1;
* conv1d uses the H axis: P, R carry the length and kernel, Q=S=1;
* a transposed conv is the stride-1 conv over its zero-inserted input (what implicit im2col
  lowering executes): R, S are its kernel and P, Q its output, so its MACs count the zeros;
  ``upsample`` records the transposed conv's stride;
* a grouped conv (depthwise when C == 1) has C and K per group and ``groups`` copies.

Layers are frozen and hashable. Two layers with the same `key` are the same loop nest and are
deduplicated in a `Network`; the node name and epilogue ride along as metadata.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from workloads.errors import WorkloadError

DIMS = ("R", "S", "P", "Q", "C", "K", "N")
KINDS = ("conv2d", "conv1d", "conv_transpose", "gemm", "gemv")

# Which loop dims index each tensor (seed 001 §6.3.2: D_w, D_i, D_o). Inputs are indexed by
# P and R (and Q and S) together through the sliding window.
WEIGHT_DIMS = ("R", "S", "C", "K")
INPUT_DIMS = ("R", "S", "P", "Q", "C", "N")
OUTPUT_DIMS = ("P", "Q", "K", "N")


@dataclasses.dataclass(frozen=True)
class Layer:
    """One operator's loop nest.

    >>> layer = Layer.conv2d(R=3, S=3, P=56, Q=56, C=64, K=64)
    >>> layer.macs
    115605504
    >>> Layer.gemm(M=128, K_red=768, N_out=3072).to_dict()["P"]
    128
    """

    kind: str
    R: int = 1
    S: int = 1
    P: int = 1
    Q: int = 1
    C: int = 1
    K: int = 1
    N: int = 1
    Hstride: int = 1
    Wstride: int = 1
    Hdilation: int = 1
    Wdilation: int = 1
    groups: int = 1
    # Zero padding of the input (top, left, bottom, right), in input pixels.
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    # Stride of a transposed conv (its input is zero-inserted by this factor); (1, 1) otherwise.
    upsample: tuple[int, int] = (1, 1)
    # Metadata: not part of the loop nest's identity.
    name: str = dataclasses.field(default="", compare=False)
    epilogue: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    def __post_init__(self) -> None:
        where = f"layer {self.name!r}" if self.name else "layer"
        if self.kind not in KINDS:
            raise WorkloadError(f"{where}: unknown kind {self.kind!r}; expected one of {KINDS}")
        for field in (*DIMS, "Hstride", "Wstride", "Hdilation", "Wdilation", "groups"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise WorkloadError(
                    f"{where}: {field} must be a positive integer, got {value!r}"
                )
        if len(self.pads) != 4 or any(int(p) < 0 for p in self.pads):
            raise WorkloadError(f"{where}: pads must be 4 non-negative integers, got {self.pads}")
        if len(self.upsample) != 2 or any(int(u) < 1 for u in self.upsample):
            raise WorkloadError(f"{where}: upsample must be 2 positive integers")
        object.__setattr__(self, "pads", tuple(int(p) for p in self.pads))
        object.__setattr__(self, "upsample", tuple(int(u) for u in self.upsample))
        object.__setattr__(self, "epilogue", tuple(self.epilogue))
        if self.kind in ("gemm", "gemv") and (self.R, self.S, self.Q) != (1, 1, 1):
            raise WorkloadError(f"{where}: a {self.kind} has R=S=Q=1, got {self.dims}")
        if self.kind == "gemv" and (self.N, self.P) != (1, 1):
            raise WorkloadError(f"{where}: a gemv has N=P=1, got {self.dims}")
        if self.kind == "conv1d" and (self.S, self.Q) != (1, 1):
            raise WorkloadError(f"{where}: a conv1d uses the H axis only (S=Q=1), got {self.dims}")

    # ----------------------------------------------------------------- constructors
    @classmethod
    def conv2d(cls, **kw: Any) -> Layer:
        return cls(kind="conv2d", **kw)

    @classmethod
    def conv1d(cls, *, R: int, P: int, C: int, K: int, N: int = 1, stride: int = 1,
               dilation: int = 1, **kw: Any) -> Layer:
        return cls(kind="conv1d", R=R, P=P, C=C, K=K, N=N, Hstride=stride,
                   Hdilation=dilation, **kw)

    @classmethod
    def gemm(cls, *, M: int, K_red: int, N_out: int, batch: int = 1, **kw: Any) -> Layer:
        """A (batched) matrix product; a GEMV when M == batch == 1."""
        kind = "gemv" if M == 1 and batch == 1 else "gemm"
        return cls(kind=kind, P=M, C=K_red, K=N_out, N=batch, **kw)

    # ----------------------------------------------------------------- derived sizes
    @property
    def dims(self) -> dict[str, int]:
        return {d: getattr(self, d) for d in DIMS}

    @property
    def macs(self) -> int:
        return self.groups * math.prod(self.dims.values())

    @property
    def input_height(self) -> int:
        """Rows of the (padded, zero-inserted) input that the sliding window reads."""
        return (self.P - 1) * self.Hstride + (self.R - 1) * self.Hdilation + 1

    @property
    def input_width(self) -> int:
        return (self.Q - 1) * self.Wstride + (self.S - 1) * self.Wdilation + 1

    @property
    def weight_words(self) -> int:
        return self.groups * self.R * self.S * self.C * self.K

    @property
    def input_words(self) -> int:
        return self.groups * self.N * self.C * self.input_height * self.input_width

    @property
    def output_words(self) -> int:
        return self.groups * self.N * self.K * self.P * self.Q

    def key(self) -> tuple:
        """Identity of the loop nest, used to deduplicate layers."""
        return dataclasses.astuple(dataclasses.replace(self, name="", epilogue=()))

    def config_str(self) -> str:
        """DOSA's `layer_count.yaml` key: R_S_P_Q_C_K_N_Wstride_Hstride_Wdilation_Hdilation."""
        return "_".join(str(v) for v in (
            self.R, self.S, self.P, self.Q, self.C, self.K, self.N,
            self.Wstride, self.Hstride, self.Wdilation, self.Hdilation))

    def to_gemm(self) -> Layer:
        """The im2col GEMM of this layer: M = N*P*Q, K_red = C*R*S, N_out = K."""
        return Layer.gemm(M=self.N * self.P * self.Q, K_red=self.C * self.R * self.S,
                          N_out=self.K, groups=self.groups, name=self.name,
                          epilogue=self.epilogue)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used by `baco workloads show --json` (counts are added by Network)."""
        return {
            "kind": self.kind, **self.dims,
            "Hstride": self.Hstride, "Wstride": self.Wstride,
            "Hdilation": self.Hdilation, "Wdilation": self.Wdilation,
            "groups": self.groups, "pads": list(self.pads), "upsample": list(self.upsample),
            "macs": self.macs, "name": self.name, "epilogue": list(self.epilogue),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Layer:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - fields - {"macs", "count"}
        if unknown:
            raise WorkloadError(f"layer record has unknown fields {sorted(unknown)}")
        kw = {k: v for k, v in data.items() if k in fields}
        for k in ("pads", "upsample", "epilogue"):
            if k in kw:
                kw[k] = tuple(kw[k])
        return cls(**kw)
