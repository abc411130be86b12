"""config.pbtxt through Triton's own `inference.ModelConfig` schema and protobuf `text_format`.

The message class is built from `model_config.pb`, the compiled descriptor of Triton's
model_config.proto (see regen_descriptor.py and NOTICE-triton.txt), so parsing is as strict
as Triton's: an unknown field, a bad enum value or a cut-off file is a ParseError.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from google.protobuf import descriptor, descriptor_pb2, descriptor_pool, json_format, message_factory, text_format

from .access import Access, AccessError
from .convention import Convention, ConventionError
from .spec import TRITON_TO_V2, V2_TO_TRITON, ModelSpec, SpecError, Tensor, VersionPolicy
from .warmup import Warmup, WarmupInput

DESCRIPTOR_FILE = Path(__file__).resolve().parent / "model_config.pb"
PLATFORM = "onnxruntime_onnx"
INT64 = (
    descriptor.FieldDescriptor.TYPE_INT64,
    descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT64,
    descriptor.FieldDescriptor.TYPE_FIXED64,
    descriptor.FieldDescriptor.TYPE_SFIXED64,
)


@lru_cache(maxsize=1)
def model_config_class():
    """Triton's `inference.ModelConfig` message class."""
    fdp = descriptor_pb2.FileDescriptorProto.FromString(DESCRIPTOR_FILE.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("inference.ModelConfig"))


@lru_cache(maxsize=1)
def _entries_class():
    """ModelConfig with its `parameters` map read as a list of entries: what a duplicate key looks like before a map
    keeps only the last one."""
    fdp = descriptor_pb2.FileDescriptorProto.FromString(DESCRIPTOR_FILE.read_bytes())
    for msg in fdp.message_type:
        if msg.name == "ModelConfig":
            entry = next(m for m in msg.nested_type if m.name == "ParametersEntry")
            entry.options.map_entry = False
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("inference.ModelConfig"))


def parse_config(text: str):
    """A ModelConfig from config.pbtxt text; raises text_format.ParseError where Triton would refuse it, and where a
    `parameters` key is given twice (a map keeps the last silently: two `access` entries must not leave it open)."""
    cfg = text_format.Parse(text, model_config_class()())
    if "parameters" in text:
        keys = [e.key for e in text_format.Parse(text, _entries_class()()).parameters]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise text_format.ParseError(f"parameter '{twice[0][:60]}' is given twice")
    return cfg


def config_of(spec: ModelSpec):
    """The ModelConfig message that says what `spec` says (the batch dimension implicit)."""
    cfg = model_config_class()(name=spec.name, platform=PLATFORM, max_batch_size=spec.max_batch_size)
    for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
        for t in tensors:
            getattr(cfg, kind).add(name=t.name, data_type=V2_TO_TRITON[t.datatype], dims=list(t.shape[1:]))
    if spec.max_queue_delay_us is not None:
        cfg.dynamic_batching.max_queue_delay_microseconds = spec.max_queue_delay_us
    write_warmups(cfg, spec.warmups)
    if spec.response_cache:
        cfg.response_cache.enable = True
    for key, value in spec.access.parameters().items():
        cfg.parameters[key].string_value = value
    for key, value in (spec.convention.parameters() if spec.convention else {}).items():
        cfg.parameters[key].string_value = value
    p = spec.version_policy
    if p.kind == "latest":
        cfg.version_policy.latest.num_versions = p.num_versions
    elif p.kind == "all":
        cfg.version_policy.all.SetInParent()
    else:
        cfg.version_policy.specific.versions.extend(p.versions)
    return cfg


def config_text(spec: ModelSpec) -> str:
    """config.pbtxt for `spec`."""
    return text_format.MessageToString(config_of(spec))


def apply_config(spec: ModelSpec, cfg) -> ModelSpec:
    """`spec` (from metadata.json) with the Triton fields of a parsed config.pbtxt; the tensors of the
    two files must agree."""
    if cfg.name and cfg.name != spec.name:
        raise SpecError(f"config.pbtxt: name '{cfg.name}' is not the folder name '{spec.name}'")
    if cfg.platform and cfg.platform != PLATFORM or cfg.backend and cfg.backend != "onnxruntime":
        raise SpecError(f"config.pbtxt: platform '{cfg.platform or cfg.backend}' is not {PLATFORM}")
    if cfg.max_batch_size < 1:
        raise SpecError("config.pbtxt: max_batch_size must be at least 1 (the first dimension is the batch)")
    for kind, tensors, declared in (("input", spec.inputs, cfg.input), ("output", spec.outputs, cfg.output)):
        have = [Tensor(t.name, TRITON_TO_V2.get(_enum_name(t, "data_type"), "?"), (-1, *t.dims)) for t in declared]
        if sorted(have, key=lambda t: t.name) != sorted(tensors, key=lambda t: t.name):
            raise SpecError(
                f"config.pbtxt: {kind} {[t.to_json() for t in have]} disagrees with metadata.json "
                f"{[t.to_json() for t in tensors]}"
            )
    which = cfg.version_policy.WhichOneof("policy_choice")
    if which == "all":
        policy = VersionPolicy("all")
    elif which == "specific":
        policy = VersionPolicy("specific", versions=tuple(int(v) for v in cfg.version_policy.specific.versions))
    else:
        n = cfg.version_policy.latest.num_versions if which == "latest" else 1
        policy = VersionPolicy("latest", num_versions=n)
    delay = cfg.dynamic_batching.max_queue_delay_microseconds if cfg.HasField("dynamic_batching") else None
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    try:
        access = Access.from_parameters(params)
        convention = Convention.from_parameters(params) if Convention.declared(params) else None
    except (AccessError, ConventionError) as e:
        raise SpecError(str(e)) from None
    return spec.with_(
        access=access,
        convention=convention,
        max_batch_size=cfg.max_batch_size,
        max_queue_delay_us=delay,
        version_policy=policy,
        warmups=read_warmups(cfg),
        response_cache=cfg.response_cache.enable,
    )


def _enum_name(msg, fieldname: str) -> str:
    enum = msg.DESCRIPTOR.fields_by_name[fieldname].enum_type
    value = enum.values_by_number.get(getattr(msg, fieldname))
    return value.name if value else "?"


def config_json(spec: ModelSpec, instance_kind: str = "KIND_CPU") -> dict:
    """GET /v2/models/NAME/config: the config with the defaults a Triton server fills in, int64 as numbers."""
    cfg = config_of(spec)
    cfg.backend = "onnxruntime"
    cfg.model_transaction_policy.decoupled = False
    cfg.model_transaction_policy.SetInParent()
    group = cfg.instance_group.add(name=f"{spec.name}_0", count=1)
    group.kind = group.DESCRIPTOR.fields_by_name["kind"].enum_type.values_by_name[instance_kind].number
    out = json_format.MessageToDict(cfg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    return _int64_as_numbers(cfg, out)


def _int64_as_numbers(msg, d: dict) -> dict:
    """json_format writes 64-bit integers as strings (proto3 JSON); Triton's JSON has numbers."""
    for f in msg.DESCRIPTOR.fields:
        if f.name not in d:
            continue
        value = getattr(msg, f.name)
        if f.type == f.TYPE_MESSAGE and not (f.message_type.GetOptions().map_entry):
            if f.is_repeated:
                d[f.name] = [_int64_as_numbers(m, x) for m, x in zip(value, d[f.name])]
            else:
                d[f.name] = _int64_as_numbers(value, d[f.name])
        elif f.type in INT64:
            d[f.name] = [int(x) for x in d[f.name]] if f.is_repeated else int(d[f.name])
    return d


def read_warmups(cfg) -> tuple[Warmup, ...]:
    """The `model_warmup` entries of a parsed ModelConfig."""
    out = []
    for w in cfg.model_warmup:
        if not w.inputs:
            raise SpecError(f"config.pbtxt: model_warmup '{w.name}' has no inputs")
        inputs = []
        for name, i in sorted(w.inputs.items()):
            kind = i.WhichOneof("input_data_type")
            if kind is None:
                raise SpecError(
                    f"config.pbtxt: model_warmup '{w.name}' input '{name}' needs zero_data, random_data "
                    "or input_data_file"
                )
            dtype = i.DESCRIPTOR.fields_by_name["data_type"].enum_type.values_by_number[i.data_type].name
            inputs.append(
                WarmupInput(
                    name,
                    TRITON_TO_V2.get(dtype, dtype),
                    tuple(i.dims),
                    kind,
                    i.input_data_file if kind == "input_data_file" else "",
                )
            )
        out.append(Warmup(w.name, w.batch_size, w.count, tuple(inputs)))
    return tuple(out)


def write_warmups(cfg, warmups: tuple[Warmup, ...]) -> None:
    """Add `warmups` to a ModelConfig message."""
    for w in warmups:
        entry = cfg.model_warmup.add(name=w.name, batch_size=w.batch_size, count=w.count)
        for i in w.inputs:
            value = entry.inputs[i.name]
            value.data_type = (
                value.DESCRIPTOR.fields_by_name["data_type"].enum_type.values_by_name[V2_TO_TRITON[i.datatype]].number
            )
            value.dims.extend(i.dims)
            if i.kind == "input_data_file":
                value.input_data_file = i.file
            else:
                setattr(value, i.kind, True)
