"""The model repository contract, shared by `training/` (which writes models) and `service/` (which
serves them). Torch-free and service-free: numpy-free even, protobuf for config.pbtxt.

See docs/model-repository.md for the layout and the rules.
"""

from .access import Access, AccessError
from .folder import (
    MODEL_FILE,
    Written,
    check_version,
    portable,
    portable_command,
    read_access,
    read_spec,
    read_version,
    sha256_bytes,
    sha256_file,
    version_numbers,
    write_version,
)
from .serving import ONNX_HEIGHT, ONNX_WIDTH, ContractError, ImageSource, SeparableStage, check_onnx_geometry
from .spec import (
    IMAGE_COORDINATES,
    NAME_MAX,
    NAME_RE,
    ONNX_TO_V2,
    TASKS,
    ModelSpec,
    SpecError,
    Task,
    Tensor,
    VersionPolicy,
    VersionRecord,
)
from .triton import config_json, config_text, parse_config

__all__ = [
    "Access",
    "AccessError",
    "read_access",
    "MODEL_FILE",
    "Written",
    "check_version",
    "portable",
    "portable_command",
    "read_spec",
    "read_version",
    "sha256_bytes",
    "sha256_file",
    "version_numbers",
    "write_version",
    "IMAGE_COORDINATES",
    "NAME_MAX",
    "NAME_RE",
    "ONNX_TO_V2",
    "TASKS",
    "ModelSpec",
    "SpecError",
    "Task",
    "Tensor",
    "VersionPolicy",
    "VersionRecord",
    "config_json",
    "config_text",
    "parse_config",
    "ImageSource",
    "ContractError",
    "SeparableStage",
    "check_onnx_geometry",
    "ONNX_WIDTH",
    "ONNX_HEIGHT",
]
