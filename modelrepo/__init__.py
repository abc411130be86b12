"""The model repository contract, shared by `training/` (which writes models) and `service/` (which
serves them). Torch-free and service-free: numpy-free even, protobuf for config.pbtxt.

See docs/model-repository.md for the layout and the rules.
"""

from .access import Access, AccessError, Guard, PolicyChanged
from .diskcache import CacheTooSmall
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
from .location import LocationError, S3Location, is_s3, parse_s3
from .open import open_repository, open_target
from .repository import (
    LocalRepository,
    Repository,
    StorageUnavailable,
    Target,
    folder_stamp,
    folder_unchanged,
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
    "CacheTooSmall",
    "LocalRepository",
    "LocationError",
    "Repository",
    "S3Location",
    "StorageUnavailable",
    "Target",
    "folder_stamp",
    "folder_unchanged",
    "is_s3",
    "open_repository",
    "open_target",
    "parse_s3",
    "Access",
    "AccessError",
    "Guard",
    "PolicyChanged",
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
