"""What every encoding is: a typed config, a plug-in with hooks, and the registry that names them (tiny-cuda-nn style).

- `EncodingConfig`: the base of each encoding's typed config (its own dataclass: the grid's `GridConfig`, the
  fixed-frequency `FourierConfig`), with the fields every encoding gets from the fit: `name`, `in_dim`, `seed` and
  `image_size`. Saved in checkpoints and metadata.json in the *flat form*: one dict of the common fields and the
  encoding's own options, each under its flat name (`FLAT_PREFIX` + field: the grid's `levels` is `grid_levels`).
  `EncodingConfig(name=…, **flat)` and `EncodingConfig.from_dict(d)` read that form, today's and the older one in
  which every config carried every encoding's options (`LEGACY_KEYS`), into the typed config of the encoding named.
- `Encoding`: the plug-in. It builds the module (`build`) and refuses bad options (`validate`); its other hooks have
  harmless defaults: a start from the image (`initialise`), optimizer options, a step after training (`finish`),
  the ONNX opset it needs, its own export layout (`export_plan`), how the file stores it (`store`), and its
  command-line options (`add_arguments`, `from_args`). Fitting, export and the CLI call these and name no encoding.
- `ENCODINGS`, `register`: name → plug-in; training/encodings/__init__.py registers the built-in ones.
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass, field, fields
from typing import Callable, ClassVar, Protocol

import numpy as np
from torch import nn

from ..errors import UsageError, unknown

COMMON = ("name", "in_dim", "seed", "image_size")
# The keys of the flat config every checkpoint and metadata.json held before encodings were plug-ins: each config
# carried all of them, whatever its encoding. Reading such a dict, an encoding takes its own and ignores the rest.
LEGACY_KEYS = frozenset(
    {
        "name",
        "in_dim",
        "scale",
        "features",
        "levels",
        "max_freq",
        "bandwidth",
        "damping",
        "nyquist",
        "seed",
        "grid_levels",
        "grid_features",
        "grid_finest_features",
        "grid_log2_table",
        "grid_base",
        "grid_finest",
        "grid_bytes_per_pixel",
        "grid_table_bits",
        "image_size",
    }
)
INITS = ("pyramid", "random")  # pyramid: the encoding's start from the image (Encoding.initialise), where it has one


class _ReadsFlatForm(type):
    """`EncodingConfig(…)` itself reads the flat form into the typed config of the encoding it names; a subclass
    (`GridConfig(levels=4, …)`) is constructed as any dataclass."""

    def __call__(cls, *args, **kwargs):
        if cls is EncodingConfig:
            return from_flat(*args, **kwargs)
        return super().__call__(*args, **kwargs)


@dataclass
class EncodingConfig(metaclass=_ReadsFlatForm):
    name: str = "gaussian"
    in_dim: int = 2
    seed: int = 0
    image_size: list[int] = field(default_factory=lambda: [0, 0])  # [W, H] of the fitted pixel grid
    FLAT_PREFIX: ClassVar[str] = ""  # the encoding's own options are saved as FLAT_PREFIX + field name

    @classmethod
    def own_fields(cls) -> list[str]:
        """The encoding's own options (the fields after the common ones)."""
        return [f.name for f in fields(cls) if f.name not in COMMON]

    @classmethod
    def flat_names(cls) -> dict[str, str]:
        """{flat name: field} of the encoding's own options."""
        return {cls.FLAT_PREFIX + f: f for f in cls.own_fields()}

    def to_dict(self) -> dict:
        """The flat form: name, in_dim, the encoding's own options under their flat names, seed, image_size."""
        own = {flat: copy.deepcopy(getattr(self, f)) for flat, f in self.flat_names().items()}
        return {"name": self.name, "in_dim": self.in_dim, **own, "seed": self.seed, "image_size": list(self.image_size)}

    @classmethod
    def from_dict(cls, d: dict) -> "EncodingConfig":
        """The typed config of a saved flat form (checkpoint `model_args`, metadata.json `architecture`)."""
        return from_flat(**d)


def from_flat(name: str = "gaussian", **flat) -> EncodingConfig:
    """The typed config of encoding `name` from flat options. Keys of other encodings (and of the old flat form)
    are ignored; a key no encoding has is refused, as is an unknown name."""
    config = encoding_for(name).config
    known = LEGACY_KEYS.union(*(p.config.flat_names() for p in ENCODINGS.values()))
    strange = sorted(set(flat) - known)
    if strange:
        raise UsageError(
            f"unknown option(s) of the {name} encoding: {', '.join(strange)}; "
            f"valid: {', '.join(sorted(set(COMMON[1:]) | set(config.flat_names())))}"
        )
    own = {f: flat[k] for k, f in config.flat_names().items() if k in flat}
    return config(name=name, **{k: flat[k] for k in COMMON[1:] if k in flat}, **own)


class OptionError(UsageError):
    """An option an encoding refuses: `option` (a field of its config) of encoding `encoding`, and `problem`, what
    is wrong with it. The message names the option (`subject` may word it otherwise); a command line prints its flag
    for it instead (`Encoding.flag`)."""

    def __init__(self, encoding: str, option: str, problem: str, subject: str = ""):
        self.encoding, self.option, self.problem = encoding, option, problem
        super().__init__(f"{subject or f'{option} of the {encoding} encoding'} {problem}")


@dataclass
class Fitted:
    """What an encoding's finish step may use besides the model."""

    image: np.ndarray  # [H, W, 3] the fitted image
    fp16_weights: bool  # the weights are rounded to float16
    pixels: Callable[[], tuple[np.ndarray, np.ndarray]]  # the training pixels (coords [N, 2], rgb [N, 3]), on demand
    target_bytes: int | None = None  # fit-image --target-bytes: the model file's bytes at most
    target_psnr: float | None = None  # --target-psnr: dB over the training pixels at least
    target_soft: bool = False  # a target_psnr out of reach keeps the finest rounding (a block model's overview)
    file_bytes: Callable[[], int] | None = None  # the bytes of the model's file as it stands (an export)


class ExportPlan(Protocol):
    """An encoding's own ONNX layout: export traces `head` (the model after the encoding, features [N, `features`]
    named `head_input` → the outputs) and `compose` puts the encoding's nodes in front of that graph."""

    head: nn.Module
    features: int
    head_input: str

    def compose(self, head_onnx: bytes, input_name: str) -> bytes: ...


class Encoding:
    """One encoding, as a plug-in. A subclass sets `name` and `config` (its typed config class) and implements
    `build`; every other hook has a default that does nothing. `model` below is the whole image model (ImageINR:
    `encoding`, `body`, `config`)."""

    name: str = ""
    config: type[EncodingConfig] = EncodingConfig

    # -- the module --------------------------------------------------------------------------------------------------
    def build(self, cfg: EncodingConfig) -> nn.Module:
        """The module: coords [N, in_dim] → features [N, out_dim], with `out_dim`; its tensors as buffers or
        parameters so that they are part of the exported graph. It validates `cfg` itself."""
        raise NotImplementedError

    def check_options(self, cfg: EncodingConfig) -> None:
        """Refuse options out of their ranges (OptionError), with or without the image."""

    def validate(self, cfg: EncodingConfig) -> None:
        """Refuse a config the encoding cannot build (OptionError): its options, and what they need of the fit."""
        self.check_options(cfg)

    # -- training ----------------------------------------------------------------------------------------------------
    def initialise(self, cfg: EncodingConfig, model: nn.Module, image: np.ndarray, protocol: str) -> float | None:
        """Start the model from its image, in place (fit-image --init pyramid); the seconds it took, or None when
        the model keeps its random start."""
        return None

    def optimizer_options(self, cfg: EncodingConfig) -> dict:
        """Keyword arguments of the model's Adam optimizer."""
        return {}

    def finish(self, cfg: EncodingConfig, model: nn.Module, fitted: Fitted) -> dict:
        """After training and the float16 rounding, before scoring and export: change the model in place (to meet
        `fitted`'s byte or PSNR target, when the encoding has them); returns entries for the fit's training
        history."""
        return {}

    def check_target(self, cfg: EncodingConfig) -> None:
        """Refuse (UsageError) a byte or PSNR target the encoding cannot keep to, before training; by default every
        one: only an encoding whose finish step controls the file's bytes takes them."""
        raise UsageError(f"the {self.name} encoding takes no byte or PSNR target (the grid preset does)")

    # -- export ------------------------------------------------------------------------------------------------------
    def opset(self, cfg: EncodingConfig, model: nn.Module) -> int:
        """The ONNX opset the model's graph needs at least (0: the exporter's default will do)."""
        return 0

    def export_plan(self, cfg: EncodingConfig, model: nn.Module, input_name: str) -> ExportPlan | None:
        """The encoding's own graph layout for `model`, or None to trace the model as it is."""
        return None

    def store(self, cfg: EncodingConfig, model: nn.Module, onnx_bytes: bytes) -> tuple[bytes, dict]:
        """The exported file with the encoding's storage (e.g. 8-bit tables), and entries for the metadata's
        `export` that describe it."""
        return onnx_bytes, {}

    # -- the command line --------------------------------------------------------------------------------------------
    def add_arguments(self, parser: argparse.ArgumentParser, default_help: Callable[[str, str], str]) -> None:
        """Add the encoding's options to fit-image's parser (encodings that share a config add them once).
        `default_help(key, sep)` is the help's '(default: …)' for an option whose default a built-in image or a
        model may change (cli_image.FIT_DEFAULTS)."""

    def from_args(self, args: argparse.Namespace, image_size: tuple[int, int]) -> EncodingConfig:
        """The config the parsed options ask for, fitting an image of `image_size` (W, H)."""
        return self.config(name=self.name, seed=args.seed, image_size=list(image_size))

    def flag(self, option: str) -> str:
        """The command-line flag of an option: --FLAT-NAME."""
        return "--" + (self.config.FLAT_PREFIX + option).replace("_", "-")


ENCODINGS: dict[str, Encoding] = {}


def register(plugin: Encoding) -> Encoding:
    """Add an encoding under its name (one line per encoding in training/encodings/__init__.py)."""
    if not plugin.name or plugin.name in ENCODINGS:
        raise ValueError(f"an encoding needs a name of its own, got {plugin.name!r}")
    ENCODINGS[plugin.name] = plugin
    return plugin


def unregister(name: str) -> None:
    ENCODINGS.pop(name, None)


def encoding_for(cfg: EncodingConfig | str) -> Encoding:
    """The plug-in of a config (or a name); an unknown name lists the valid ones."""
    name = cfg if isinstance(cfg, str) else cfg.name
    try:
        plugin = ENCODINGS[name]
    except KeyError:
        raise unknown("encoding", name, ENCODINGS) from None
    if not isinstance(cfg, (str, plugin.config)):
        raise UsageError(f"the {name} encoding takes a {plugin.config.__name__}, not a {type(cfg).__name__}")
    return plugin
