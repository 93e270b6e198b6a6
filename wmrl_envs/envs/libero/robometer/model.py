"""Robometer's network (:class:`RobometerModel`): a Qwen3-VL backbone plus its heads (``torch.nn.Module``).

* **Heads.** Each head is ``Linear(h, h/2) -> LayerNorm -> GELU -> Dropout -> Linear(h/2, o)``
  on the last hidden state (h = the language model's hidden size). The released model predicts
  progress as ``o = 10`` discrete bins (progress = softmax-weighted mean of 10 bin centres
  evenly spaced on [0, 1]); a head with ``o = 1`` ends in a sigmoid (continuous progress). The
  success head gives one logit (success probability = its sigmoid). How the heads read the
  backbone (bins, progress token or pooling) is :class:`RobometerHeadConfig`.

The heads follow robometer/robometer's ``PredictionHeadsMixin`` (``robometer/models/heads.py``),
the progress decoding its ``convert_bins_to_continuous``; ``tests/envs/libero/test_robometer_golden.py``
checks the heads' parameter names and shapes and their outputs on fixed hidden states against
the authors' code (:mod:`.loading` has the checkpoint files). The backbone is transformers'
``Qwen3VLModel`` itself; the numbers the real checkpoint gives have not been checked (its
weights cannot be downloaded here).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .processor import PROG_TOKEN, VISION_END, VISION_START

__all__ = ["RobometerHeadConfig", "RobometerModel"]


@dataclass
class RobometerHeadConfig:
    """How Robometer's heads read the backbone.

    Attributes:
        progress_bins: number of discrete progress bins (int >= 2; progress = softmax-weighted
            mean of bin centres ``linspace(0, 1, bins)``), or ``None`` for a continuous head
            that ends in a sigmoid. The released checkpoint uses 10.
        use_per_frame_progress_token: read the hidden state at the ``<|prog_token|>`` placed
            after every frame (released default); ``False`` pools each frame's image tokens.
        frame_pooling: pooling when not using progress tokens: ``"mean"``, ``"boundary"``
            (last image token) or ``"attention"`` (learned ``frame_pool_attn`` weights).
        frame_pooling_attn_temperature: softmax temperature of attention pooling (> 0).
        dropout: dropout rate inside the heads (inactive at inference).
    """

    progress_bins: int | None = 10
    use_per_frame_progress_token: bool = True
    frame_pooling: str = "mean"
    frame_pooling_attn_temperature: float = 1.0
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.progress_bins is not None and (
            isinstance(self.progress_bins, bool) or int(self.progress_bins) < 2
        ):
            raise ValueError(f"progress_bins must be None (continuous) or an int >= 2, got {self.progress_bins!r}")
        if self.frame_pooling not in ("mean", "boundary", "attention"):
            raise ValueError(
                f"frame_pooling must be 'mean', 'boundary' or 'attention', got {self.frame_pooling!r}"
            )
        if not self.frame_pooling_attn_temperature > 0:
            raise ValueError(
                f"frame_pooling_attn_temperature must be > 0, got {self.frame_pooling_attn_temperature}"
            )

    @classmethod
    def from_experiment_yaml(cls, path: str | Path, **overrides: Any) -> RobometerHeadConfig:
        """Read the head settings from a Robometer training ``config.yaml``.

        Uses ``model.use_per_frame_progress_token``, ``model.frame_pooling``,
        ``model.frame_pooling_attn_temperature`` and ``model``/``loss``
        ``.progress_loss_type`` (``"discrete"`` -> ``progress_discrete_bins`` bins).
        Missing or interpolated (``${...}``) values keep their defaults.

        Raises:
            ValueError: the file describes a video-mode model (``use_multi_image: false``),
                which is not supported, or has invalid values.
        """
        import yaml

        with open(path, encoding="utf-8") as fh:
            loaded = yaml.safe_load(fh) or {}
        sections = [loaded.get(name) or {} for name in ("model", "loss", "data")]

        def get(key: str) -> Any:
            for section in sections:
                value = section.get(key) if isinstance(section, dict) else None
                if value is not None and not (isinstance(value, str) and value.startswith("${")):
                    return value
            return None

        kwargs: dict[str, Any] = {}
        multi_image = get("use_multi_image")
        if multi_image is False:
            raise ValueError(
                f"{path}: use_multi_image is false (video-mode Robometer); only multi-image "
                "checkpoints are supported"
            )
        token = get("use_per_frame_progress_token")
        if token is not None:
            kwargs["use_per_frame_progress_token"] = bool(token)
        for key in ("frame_pooling", "frame_pooling_attn_temperature"):
            if get(key) is not None:
                kwargs[key] = get(key)
        loss_type = get("progress_loss_type")
        if isinstance(loss_type, str):
            discrete = loss_type.lower() == "discrete"
            kwargs["progress_bins"] = int(get("progress_discrete_bins") or 10) if discrete else None
        kwargs.update(overrides)
        return cls(**kwargs)


def _make_head(hidden: int, out: int, dropout: float, sigmoid: bool) -> nn.Sequential:
    """``Linear(h, h/2) -> LayerNorm -> GELU -> Dropout -> Linear(h/2, out) [-> Sigmoid]``."""
    layers = [
        nn.Linear(hidden, hidden // 2),
        nn.LayerNorm(hidden // 2),
        nn.GELU(),
        nn.Dropout(dropout),
        nn.Linear(hidden // 2, out),
    ]
    if sigmoid:
        layers.append(nn.Sigmoid())
    return nn.Sequential(*layers)


class RobometerModel(nn.Module):
    """Qwen3-VL backbone plus Robometer's progress, success and preference heads.

    The parameter names equal those of the released checkpoint (``model.*`` for the
    backbone, ``progress_head.*``, ``success_head.*``, ``preference_head.*``,
    ``frame_pool_attn.weight``), so its state dict loads as is.

    Args:
        backbone: a ``transformers.Qwen3VLModel`` (the model without LM head), whose
            ``config.text_config.hidden_size`` is ``h``.
        head_config: :class:`RobometerHeadConfig` (default: 10 progress bins, progress
            tokens).

    Heads are created in the backbone's dtype; the preference head is kept for the
    state-dict layout but never used here.
    """

    def __init__(self, backbone: Any, head_config: RobometerHeadConfig | None = None) -> None:
        super().__init__()
        cfg = head_config or RobometerHeadConfig()
        self.head_config = cfg
        self.model = backbone
        text_config = getattr(backbone.config, "text_config", None)
        hidden = getattr(text_config, "hidden_size", None) or getattr(backbone.config, "hidden_size", None)
        if hidden is None:
            raise ValueError(f"cannot read the hidden size from {type(backbone.config).__name__}")
        self.hidden_size = int(hidden)
        bins = cfg.progress_bins
        self.progress_head = _make_head(self.hidden_size, bins or 1, cfg.dropout, sigmoid=bins is None)
        self.preference_head = _make_head(self.hidden_size, 1, cfg.dropout, sigmoid=False)
        self.success_head = _make_head(self.hidden_size, 1, cfg.dropout, sigmoid=False)
        self.frame_pool_attn = nn.Linear(self.hidden_size, 1, bias=False)
        dtype = next(backbone.parameters()).dtype
        for module in (self.progress_head, self.preference_head, self.success_head, self.frame_pool_attn):
            module.to(dtype=dtype)

    @property
    def device(self) -> torch.device:
        """Device of the first parameter."""
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the first parameter."""
        return next(self.parameters()).dtype

    def decode_progress(self, head_output: torch.Tensor) -> torch.Tensor:
        """Progress in [0, 1] from the progress head's output ``(F, bins)`` or ``(F, 1)`` -> ``(F,)`` float32."""
        out = head_output.float()
        if self.head_config.progress_bins is None:
            return out.reshape(out.shape[0])
        centres = torch.linspace(0.0, 1.0, out.shape[-1], device=out.device, dtype=out.dtype)
        return (torch.softmax(out, dim=-1) * centres).sum(dim=-1)

    def frame_embeddings(
        self,
        hidden: torch.Tensor,
        input_ids: torch.Tensor,
        *,
        prog_token_id: int,
        vision_start_id: int,
        vision_end_id: int,
    ) -> list[torch.Tensor]:
        """Per-frame embeddings of each sequence: a list of B tensors ``(F_b, h)``.

        ``hidden`` is the last hidden state ``(B, L, h)``, ``input_ids`` ``(B, L)``.

        Raises:
            ValueError: a sequence has no progress token / vision span.
        """
        result = []
        for b in range(input_ids.shape[0]):
            ids, states = input_ids[b], hidden[b]
            if self.head_config.use_per_frame_progress_token:
                pos = (ids == prog_token_id).nonzero(as_tuple=True)[0]
                if pos.numel() == 0:
                    raise ValueError(f"sequence {b} has no {PROG_TOKEN} token")
                result.append(states[pos])
                continue
            starts = (ids == vision_start_id).nonzero(as_tuple=True)[0].tolist()
            ends = (ids == vision_end_id).nonzero(as_tuple=True)[0].tolist()
            if not starts or len(starts) != len(ends):
                raise ValueError(f"sequence {b}: {len(starts)} {VISION_START} but {len(ends)} {VISION_END} tokens")
            frames = []
            for s, e in zip(starts, ends):
                span = states[s + 1 : e]
                if span.shape[0] == 0:
                    frames.append((states[s] + states[e]) / 2)
                elif self.head_config.frame_pooling == "mean":
                    frames.append(span.mean(dim=0))
                elif self.head_config.frame_pooling == "boundary":
                    frames.append(span[-1])
                else:
                    temperature = self.head_config.frame_pooling_attn_temperature
                    scores = self.frame_pool_attn(span).squeeze(-1) / temperature
                    frames.append((torch.softmax(scores, dim=0).unsqueeze(-1) * span).sum(dim=0))
            result.append(torch.stack(frames))
        return result

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        pixel_values: torch.Tensor,
        image_grid_thw: torch.Tensor,
        mm_token_type_ids: torch.Tensor | None = None,
        *,
        prog_token_id: int,
        vision_start_id: int,
        vision_end_id: int,
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-frame progress and success probability of each sequence of a batch.

        Args:
            input_ids: ``(B, L)`` int64 token ids (right-padded).
            attention_mask: ``(B, L)`` 1 for tokens, 0 for padding.
            pixel_values: ``(P, C·t·p·p)`` flattened patches of all frames of the batch.
            image_grid_thw: ``(N_frames, 3)`` int64 patch grid of every frame, in order.
            mm_token_type_ids: ``(B, L)`` int, 1 at image tokens (built if ``None``).
            prog_token_id, vision_start_id, vision_end_id: token ids.

        Returns:
            B pairs ``(progress, success_prob)``, each a float32 tensor ``(F_b,)`` with
            values in [0, 1] (F_b = frames of sequence b).
        """
        if mm_token_type_ids is None:
            image_id = getattr(self.model.config, "image_token_id", None)
            mm_token_type_ids = (input_ids == image_id).int()
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            pixel_values=pixel_values.to(self.dtype),
            image_grid_thw=image_grid_thw,
            mm_token_type_ids=mm_token_type_ids,
            output_hidden_states=True,
            return_dict=True,
        )
        hidden = out.hidden_states[-1] if getattr(out, "hidden_states", None) else out.last_hidden_state
        frames = self.frame_embeddings(
            hidden,
            input_ids,
            prog_token_id=prog_token_id,
            vision_start_id=vision_start_id,
            vision_end_id=vision_end_id,
        )
        counts = [f.shape[0] for f in frames]
        progress, success = self.read_heads(torch.cat(frames, dim=0))
        return list(zip(progress.split(counts), success.split(counts)))

    def read_heads(self, frame_embeddings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Progress and success probability of frame embeddings ``(F, h)`` -> two float32 ``(F,)``.

        Progress: :meth:`decode_progress` of the progress head (Robometer's
        ``convert_bins_to_continuous``, ``robometer/models/utils.py``); success: the sigmoid of
        the success head's logit (``robometer/evals/eval_server.py`` l.588-590). Checked against
        the authors' heads in ``tests/envs/libero/test_robometer_golden.py``.
        """
        progress = self.decode_progress(self.progress_head(frame_embeddings))
        success = torch.sigmoid(self.success_head(frame_embeddings).float().reshape(-1))
        return progress, success
