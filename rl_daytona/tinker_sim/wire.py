"""The protobuf bodies the `tinker` SDK (0.38) sends and expects, in and out of plain values.

    forward_backward request  (application/x-protobuf, maybe zstd) -> FwdBwdCall with TrainDatums
    ForwardBackwardOutput     <- per-datum target logprobs + summed metrics
    SampleResponse            <- sampled tokens + their logprobs

Invariant: a datum is validated by the built-in trainer's own `parse_datum` (the same rules
the model applies), so a malformed body is a `TrainingError` (HTTP 400) and never a half-read
batch. Everything else the SDK sends is JSON and is read in `routes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rl_daytona.policy.training import TrainDatum, TrainingError, parse_datum



@dataclass(frozen=True)
class FwdBwdCall:
    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float]
    datums: tuple[TrainDatum, ...]
    forward_only: bool


def _pb():  # type: ignore[no-untyped-def]
    from tinker.proto import tinker_public_pb2

    return tinker_public_pb2


def _tensor_values(msg, pb) -> list[float]:  # type: ignore[no-untyped-def]
    dtype = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}.get(msg.dtype)
    if dtype is None or msg.HasField("sparse_csr"):
        raise TrainingError("loss_fn_inputs must be dense float32/int64 tensors")
    return np.frombuffer(msg.dense, dtype=dtype).tolist()


def decode_forward_backward(body: bytes, content_encoding: str = "") -> FwdBwdCall:
    """A forward_backward request body as a validated call (TrainingError when it is not one)."""
    pb = _pb()
    if content_encoding == "zstd":
        import zstandard

        body = zstandard.ZstdDecompressor().decompress(body)
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise TrainingError(f"forward_backward body is not a ForwardBackwardRequest: {exc}") from None
    if not msg.data:
        raise TrainingError("forward_backward needs at least one datum")
    datums = []
    for index, datum in enumerate(msg.data):
        tokens: list[int] = []
        for chunk in datum.model_input:
            if chunk.WhichOneof("chunk") != "encoded_text":
                raise TrainingError(f"datum {index}: only encoded_text chunks are supported")
            tokens += np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist()
        inputs = {name: _tensor_values(t, pb) for name, t in datum.loss_fn_inputs.items()}
        datums.append(parse_datum({"model_input": tokens, "loss_fn_inputs": inputs}, index))
    config = {k: float(v) for k, v in msg.loss_fn_config.items()}
    return FwdBwdCall(msg.model_id, int(msg.seq_id), msg.loss_fn, config, tuple(datums),
                      bool(msg.forward_only))


def encode_forward_backward_output(logprobs: Sequence[Sequence[float]], metrics: dict[str, float]) -> bytes:
    """ForwardBackwardOutput: one ArrayRecord whose `logprobs` field holds each datum's targets."""
    pb = _pb()
    out = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    for key, value in metrics.items():
        out.metrics[key] = float(value)
    arrays = [np.asarray(lp, dtype=np.float32) for lp in logprobs]
    offsets = np.cumsum([0] + [a.nbytes for a in arrays], dtype=np.int64)
    record = out.loss_fn_outputs.add()
    record.num_datums = len(arrays)
    field = record.fields["logprobs"]
    field.dtype = pb.DTYPE_FLOAT32
    field.data = b"".join(a.tobytes() for a in arrays)
    field.offsets = offsets.tobytes()
    return out.SerializeToString()


@dataclass(frozen=True)
class SampledSeq:
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    stop_reason: str  # "stop" | "length"


def encode_sample_response(sequences: Sequence[SampledSeq]) -> bytes:
    pb = _pb()
    out = pb.SampleResponse()
    for seq in sequences:
        item = out.sequences.add()
        item.stop_reason = pb.STOP_REASON_STOP if seq.stop_reason == "stop" else pb.STOP_REASON_LENGTH
        item.tokens = np.asarray(seq.tokens, dtype=np.int32).tobytes()
        item.logprobs = np.asarray(seq.logprobs, dtype=np.float32).tobytes()
    return out.SerializeToString()
