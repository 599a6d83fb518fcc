#!/usr/bin/env python3
"""Reads a TensorBoard event file written by troupe's SummaryWriter with the reference protobuf decoder
(Debian's python3-protobuf) and compares it with the run's metrics.jsonl.

    check_tfevents.py EVENTS_FILE METRICS_JSONL

Checks every TFRecord's length and masked CRC-32C (computed here from the definition, not by troupe's
code), that the first Event is file_version "brain.Event:2", and that the scalar Events equal the
JSON lines in order: tag, step, wall_time, and simple_value == float32(value). Prints "ok: N scalar
events match" and exits 0; on a mismatch prints one line saying which record and exits 1; exits 77
when google.protobuf is not installed (the caller skips).
"""
import json
import math
import struct
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:
    print("skip: python3-protobuf (google.protobuf) is not installed")
    sys.exit(77)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    """tensorboard's Event / Summary / Summary.Value (the fields troupe writes), built from descriptors."""
    f = descriptor_pb2.FileDescriptorProto(name="troupe_check_event.proto", package="tensorboard", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    summary = f.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.field.add(name="tag", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=T.TYPE_FLOAT, label=T.LABEL_OPTIONAL)
    summary.field.add(name="value", number=1, type=T.TYPE_MESSAGE, label=T.LABEL_REPEATED,
                      type_name=".tensorboard.Summary.Value")
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=T.TYPE_MESSAGE, label=T.LABEL_OPTIONAL,
                    type_name=".tensorboard.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    desc = pool.FindMessageTypeByName("tensorboard.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def records(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        if len(data) - at < 12:
            raise ValueError(f"truncated header at byte {at}")
        (length,) = struct.unpack_from("<Q", data, at)
        (len_crc,) = struct.unpack_from("<I", data, at + 8)
        if len_crc != masked(data[at:at + 8]):
            raise ValueError(f"length CRC mismatch at byte {at}")
        body = data[at + 12:at + 12 + length]
        if len(body) != length or len(data) < at + 16 + length:
            raise ValueError(f"record at byte {at} runs past the end")
        (body_crc,) = struct.unpack_from("<I", data, at + 12 + length)
        if body_crc != masked(body):
            raise ValueError(f"data CRC mismatch at byte {at}")
        yield body
        at += 16 + length


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip())
        return 2
    events_path, jsonl_path = sys.argv[1], sys.argv[2]
    Event = event_class()
    events = []
    try:
        for body in records(events_path):
            ev = Event()
            ev.ParseFromString(body)
            events.append(ev)
    except (ValueError, OSError) as e:
        print(f"{events_path}: {e}")
        return 1
    if not events or events[0].file_version != "brain.Event:2":
        print(f"{events_path}: the first event is not file_version brain.Event:2")
        return 1
    scalars = [(ev, v) for ev in events[1:] for v in ev.summary.value]
    want = [json.loads(line) for line in open(jsonl_path) if line.strip()]
    if len(scalars) != len(want):
        print(f"{events_path}: {len(scalars)} scalar events, {jsonl_path} has {len(want)} records")
        return 1
    for i, ((ev, v), w) in enumerate(zip(scalars, want)):
        got = (v.tag, ev.step, ev.wall_time, v.simple_value)
        exp = (w["tag"], w["step"], w["wall_time"], f32(w["value"]))
        if got[:3] != exp[:3] or not same(got[3], exp[3]):
            print(f"{events_path}: scalar {i}: event has {got}, the JSON line {exp}")
            return 1
    print(f"ok: {len(scalars)} scalar events match {jsonl_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
