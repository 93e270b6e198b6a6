"""Action tokenizers of OpenVLA/MiniVLA (uniform bins; MiniVLA's VQ action chunks) and the
un-normalisation of actions.

The VLA policy (:mod:`agents.vla.policy`) writes actions as tokens and reads them back with
this tokenizer; it is pure array code (no model), so it lives apart from the policy.

Action representation (OpenVLA: Kim et al. 2024, arXiv 2406.09246, §3.3 and its
``prismatic/vla/action_tokenizer.py``; MiniVLA keeps it for its non-VQ models): every action
dimension (x, y, z, roll, pitch, yaw, gripper), normalised to [-1, 1], is discretised into
uniform bins and written as one token among the **last 256 ids of the vocabulary**; a 7-D action
is 7 tokens, an action chunk of C steps is ``C * 7`` tokens (step after step).
:func:`unnormalize_actions` maps normalised actions to the robot's range with OpenVLA's q01/q99
statistics.

MiniVLA's VQ models (Belkhale & Sadigh 2024; ``VQActionTokenizer`` in Stanford-ILIAD/openvla-mini's
``prismatic/vla/action_tokenizer.py``) write a whole chunk of ``H`` future actions as ``G`` tokens:
a VQ-VAE (VQ-BeT's, jayLEE0301/vq_bet_official ``vqvae/vqvae.py``) encodes the flattened chunk,
residual vector quantisation picks one of ``n_embed`` codes per round, and code ``c`` is token
``vocab_size - 1 - c``. :class:`VQActionTokenizer` reads the authors' VQ folder (``config.json``
+ ``checkpoints/model.pt``) and reproduces their encoding and decoding; the golden files in
``tests/golden/minivla`` were written by the authors' own code (``tests/golden/make_minivla_golden.py``)
and the tests compare both tokenizers with them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "ActionTokenizer",
    "VQActionTokenizer",
    "unnormalize_actions",
    "load_action_stats",
    "libero_env_actions",
]


class _ActionIds:
    """The id range both tokenizers write actions into: the last ``n_bins`` ids before
    ``vocab_size`` (subclasses set both attributes), and the check of ids read back."""

    vocab_size: int
    n_bins: int

    @property
    def token_begin(self) -> int:
        """First action token id (inclusive): ``vocab_size - n_bins``."""
        return self.vocab_size - self.n_bins

    @property
    def token_end(self) -> int:
        """End of the action token ids (exclusive): ``vocab_size``."""
        return self.vocab_size

    def _token_array(self, token_ids: Any, width: int) -> np.ndarray:
        """``token_ids`` as an integer array whose last axis is ``width`` long, every id an action id.

        Raises:
            ValueError: wrong last axis, non-integer ids, or an id outside ``[token_begin, token_end)``.
        """
        ids = np.asarray(token_ids.detach().cpu() if isinstance(token_ids, torch.Tensor) else token_ids)
        if ids.ndim == 0 or ids.shape[-1] != width:
            raise ValueError(f"token_ids must have shape (..., {width}), got {ids.shape}")
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"token_ids must be integers, got dtype {ids.dtype}")
        bad = (ids < self.token_begin) | (ids >= self.token_end)
        if bad.any():
            raise ValueError(
                f"token ids outside the action range [{self.token_begin}, {self.token_end}): "
                f"{sorted(set(ids[bad].tolist()))[:8]}"
            )
        return ids


class ActionTokenizer(_ActionIds):
    """OpenVLA's uniform-bin action tokenizer: continuous actions ↔ the last ``n_bins`` token ids.

    Following OpenVLA's implementation exactly (so real checkpoints decode correctly):
    ``n_bins`` uniformly spaced *edges* span ``[low, high]``; a value is clipped to that range and
    digitised against the edges (``d = #edges <= value``, in ``1..n_bins``; a value on an edge
    goes to the bin above it), and written as token ``vocab_size - d``. Larger values therefore
    get *smaller* ids, and the ids used are ``vocab_size - n_bins .. vocab_size - 1``. Decoding
    returns the centre of bin ``d`` among the ``n_bins - 1`` intervals between edges (``d = n_bins``,
    reached only by ``value == high``, shares the last interval), so a round trip is exact to within
    half a bin width ``(high - low) / (n_bins - 1) / 2`` (≈0.0039 for the default 256 bins on
    [-1, 1]).

    Args:
        vocab_size: number of token ids the action tokens end at (exclusive): OpenVLA-7B uses the
            Llama tokenizer's 32000; MiniVLA's "extra" tokenizer uses ``len(tokenizer)`` after its
            added ``<|extra_i|>`` tokens.
        n_bins: bins per dimension (OpenVLA: 256).
        low, high: the normalised action range (OpenVLA: [-1, 1]).
        action_dim: dimensions per action step (7: x, y, z, roll, pitch, yaw, gripper).

    Raises:
        ValueError: ``n_bins < 2``, ``vocab_size < n_bins``, ``low >= high`` or ``action_dim < 1``.

    Example:
        >>> tok = ActionTokenizer(vocab_size=32000)
        >>> ids = tok.encode(np.array([0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 0.01]))
        >>> ids.tolist()  # 2.0 is clipped to 1.0
        [31872, 31744, 31999, 31808, 31936, 31744, 31871]
        >>> tok.decode(ids).astype(float).round(3).tolist()
        [0.0, 0.996, -0.996, 0.502, -0.502, 0.996, 0.008]
        >>> tok.decode_chunk(tok.encode_chunk(np.zeros((2, 7)))).shape  # a chunk of 2 steps = 14 tokens
        (2, 7)
    """

    def __init__(
        self,
        vocab_size: int,
        n_bins: int = 256,
        low: float = -1.0,
        high: float = 1.0,
        action_dim: int = 7,
    ) -> None:
        if n_bins < 2:
            raise ValueError(f"n_bins must be >= 2, got {n_bins}")
        if vocab_size < n_bins:
            raise ValueError(f"vocab_size ({vocab_size}) must be >= n_bins ({n_bins})")
        if not low < high:
            raise ValueError(f"need low < high, got [{low}, {high}]")
        if action_dim < 1:
            raise ValueError(f"action_dim must be >= 1, got {action_dim}")
        self.vocab_size = int(vocab_size)
        self.n_bins = int(n_bins)
        self.low = float(low)
        self.high = float(high)
        self.action_dim = int(action_dim)
        self.edges = np.linspace(self.low, self.high, self.n_bins)
        self.centers = (self.edges[:-1] + self.edges[1:]) / 2.0

    def n_tokens(self, chunk: int) -> int:
        """Tokens written for ``chunk`` action steps: ``chunk * action_dim``."""
        return int(chunk) * self.action_dim

    @property
    def bin_width(self) -> float:
        """Width of one bin in action units, ``(high - low) / (n_bins - 1)``."""
        return (self.high - self.low) / (self.n_bins - 1)

    def encode(self, actions: Any) -> np.ndarray:
        """Token ids of actions.

        Args:
            actions: float array-like of shape (..., action_dim), normalised actions; values
                outside ``[low, high]`` are clipped.

        Returns:
            int64 array of shape (..., action_dim), ids in ``[token_begin, token_end)``.

        Raises:
            ValueError: the last axis is not ``action_dim`` long, or a value is NaN.
        """
        a = np.asarray(actions.detach().cpu() if isinstance(actions, torch.Tensor) else actions, dtype=np.float64)
        if a.ndim == 0 or a.shape[-1] != self.action_dim:
            raise ValueError(f"actions must have shape (..., {self.action_dim}), got {a.shape}")
        if np.isnan(a).any():
            raise ValueError("actions contain NaN")
        a = np.clip(a, self.low, self.high)
        d = np.digitize(a, self.edges)  # 1..n_bins after clipping
        return (self.vocab_size - d).astype(np.int64)

    def decode(self, token_ids: Any) -> np.ndarray:
        """Actions (bin centres) of token ids.

        Args:
            token_ids: integer array-like (or tensor) of shape (..., action_dim).

        Returns:
            float32 array of the same shape, values in ``[low, high]``.

        Raises:
            ValueError: the last axis is not ``action_dim`` long, or an id lies outside
                ``[token_begin, token_end)`` (not an action token).
        """
        ids = self._token_array(token_ids, self.action_dim)
        d = self.vocab_size - ids.astype(np.int64)
        idx = np.clip(d - 1, 0, self.n_bins - 2)
        return self.centers[idx].astype(np.float32)

    def encode_chunk(self, actions: Any) -> np.ndarray:
        """Token ids of action chunks, flattened step after step.

        Args:
            actions: float array-like of shape (..., chunk, action_dim).

        Returns:
            int64 array of shape (..., chunk * action_dim).

        Raises:
            ValueError: fewer than 2 dimensions or a wrong last axis.
        """
        a = np.asarray(actions.detach().cpu() if isinstance(actions, torch.Tensor) else actions)
        if a.ndim < 2:
            raise ValueError(f"action chunks must have shape (..., chunk, {self.action_dim}), got {a.shape}")
        ids = self.encode(a)
        return ids.reshape(*ids.shape[:-2], ids.shape[-2] * self.action_dim)

    def decode_chunk(self, token_ids: Any) -> np.ndarray:
        """Action chunks of flattened token ids.

        Args:
            token_ids: integer array-like of shape (..., chunk * action_dim).

        Returns:
            float32 array of shape (..., chunk, action_dim).

        Raises:
            ValueError: the last axis is not a positive multiple of ``action_dim``, or an id is
                not an action token.
        """
        ids = np.asarray(token_ids.detach().cpu() if isinstance(token_ids, torch.Tensor) else token_ids)
        if ids.ndim == 0 or ids.shape[-1] == 0 or ids.shape[-1] % self.action_dim:
            raise ValueError(f"token_ids must have shape (..., chunk * {self.action_dim}), got {ids.shape}")
        chunk = ids.shape[-1] // self.action_dim
        return self.decode(ids.reshape(*ids.shape[:-1], chunk, self.action_dim))


class _MLP(torch.nn.Module):
    """VQ-BeT's ``EncoderMLP`` layout (``encoder.{0,2,..}`` Linear+ReLU blocks, then ``fc``), sized
    from a state dict so that the authors' checkpoints load with their own key names."""

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        super().__init__()
        idx = sorted({int(k.split(".")[1]) for k in state if k.startswith("encoder.") and k.endswith(".weight")})
        layers: list[torch.nn.Module] = []
        for pos in range(max(idx) + 2 if idx else 0):
            if pos in idx:
                w = state[f"encoder.{pos}.weight"]
                layers.append(torch.nn.Linear(w.shape[1], w.shape[0]))
            else:
                layers.append(torch.nn.ReLU())
        self.encoder = torch.nn.Sequential(*layers)
        fc = state["fc.weight"]
        self.fc = torch.nn.Linear(fc.shape[1], fc.shape[0])
        self.load_state_dict(state)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.encoder(x))


class VQActionTokenizer(_ActionIds):
    """MiniVLA's VQ action tokenizer: a chunk of ``horizon`` actions ↔ ``groups`` token ids.

    Reads a VQ folder in the authors' layout (``config.json`` with VQ-BeT ``VqVae`` arguments
    ``input_dim_h`` (horizon H), ``input_dim_w`` (action dim A), ``n_latent_dims``,
    ``vqvae_n_embed``, ``vqvae_groups``, ``act_scale``; ``checkpoints/model.pt`` holding
    ``VqVae.state_dict()``: ``encoder``, ``decoder``, ``vq_embedding``, ``optimizer``), e.g. the
    ``vq/pretrain_vq+mx-libero_90+fach-7+ng-7+nemb-128+nlatent-512`` folder of a MiniVLA LIBERO
    checkpoint (H = 8, G = 7, 128 codes).

    Encoding (``VQActionTokenizer.__call__`` → ``VqVae.get_code``): the chunk divided by
    ``act_scale`` and flattened step after step goes through the encoder MLP; each of the G
    residual rounds picks the code whose codebook vector is nearest (Euclidean) to the residual
    and subtracts it; code ``c`` becomes token ``vocab_size - 1 - c``. Decoding
    (``decode_token_ids_to_actions`` → ``draw_code_forward`` + ``get_action_from_latent``): ids
    back to codes (clipped to ``0..n_embed-1`` as the authors do), the G codebook vectors summed,
    the decoder MLP, times ``act_scale``, reshaped to (H, A). The authors' decoding returns only
    step 0 of the chunk and their LIBERO evaluation executes one action per query;
    :meth:`decode_chunk` returns all H steps and :class:`agents.vla.policy.VLAPolicy` keeps the
    first ``chunk`` of them (default 1, the authors' choice).

    Unlike the 256 bins, a VQ round trip codes → actions → codes is exact only where the trained
    encoder maps the decoder's output back to its code; it is not a property of the format.

    Args:
        vocab_size: where the action ids end (exclusive): ``len(tokenizer)`` for MiniVLA's "extra"
            tokenizers, ``tokenizer.vocab_size`` otherwise.
        folder: the VQ folder.

    Attributes:
        horizon: H, actions per chunk. action_dim: A. groups: G, tokens per chunk.
        n_bins: codes per round (``vqvae_n_embed``; the name shared with :class:`ActionTokenizer`).
        act_scale: the VQ's action scale.

    Raises:
        FileNotFoundError: ``config.json`` or ``checkpoints/model.pt`` missing (names the path).
        ValueError: ``vocab_size < n_bins``, or a checkpoint whose shapes disagree with its config.
    """

    def __init__(self, vocab_size: int, folder: str | Path) -> None:
        folder = Path(folder)
        cfg_path, ckpt = folder / "config.json", folder / "checkpoints" / "model.pt"
        for f in (cfg_path, ckpt):
            if not f.is_file():
                raise FileNotFoundError(
                    f"{f} not found: a MiniVLA VQ folder holds config.json and checkpoints/model.pt "
                    "(as written by openvla-mini's vla-scripts/pretrain_vq.py)"
                )
        cfg = json.loads(cfg_path.read_text())
        self.horizon = int(cfg.get("input_dim_h", 10))
        self.action_dim = int(cfg.get("input_dim_w", 9))
        self.n_bins = int(cfg.get("vqvae_n_embed", 32))
        self.groups = int(cfg.get("vqvae_groups", 4))
        self.latent_dim = int(cfg.get("n_latent_dims", 512))
        self.act_scale = float(cfg.get("act_scale", 1.0))
        self.vocab_size = int(vocab_size)
        if self.vocab_size < self.n_bins:
            raise ValueError(f"vocab_size ({vocab_size}) must be >= the VQ's {self.n_bins} codes")
        state = torch.load(ckpt, map_location="cpu", weights_only=True)
        try:
            self.encoder = _MLP(state["encoder"]).eval()
            self.decoder = _MLP(state["decoder"]).eval()
            books = [state["vq_embedding"][f"layers.{q}._codebook.embed"] for q in range(self.groups)]
        except (KeyError, RuntimeError) as e:
            raise ValueError(f"{ckpt} is not a VQ-BeT VqVae state dict matching {cfg_path}: {e}") from None
        self.codebooks = torch.stack([b.reshape(b.shape[-2], b.shape[-1]) for b in books]).float()  # (G, C, D)
        flat = self.horizon * self.action_dim
        shapes_ok = (
            self.encoder.encoder[0].in_features == flat
            and self.decoder.fc.out_features == flat
            and tuple(self.codebooks.shape) == (self.groups, self.n_bins, self.latent_dim)
        )
        if not shapes_ok:
            raise ValueError(
                f"{ckpt} does not match {cfg_path}: encoder input {self.encoder.encoder[0].in_features}, "
                f"decoder output {self.decoder.fc.out_features} (config: {flat}), codebooks "
                f"{tuple(self.codebooks.shape)} (config: {(self.groups, self.n_bins, self.latent_dim)})"
            )

    def n_tokens(self, chunk: int) -> int:
        """Tokens written for a sample of ``chunk`` executed steps: always ``groups``.

        Raises:
            ValueError: ``chunk`` not in ``1..horizon``.
        """
        if not 1 <= int(chunk) <= self.horizon:
            raise ValueError(f"a VQ chunk holds 1..{self.horizon} actions, got chunk={chunk}")
        return self.groups

    @torch.no_grad()
    def encode_chunk(self, actions: Any) -> np.ndarray:
        """Token ids of action chunks.

        Args:
            actions: float array-like (..., horizon, action_dim), normalised actions.

        Returns:
            int64 array (..., groups), ids in ``[token_begin, token_end)``.

        Raises:
            ValueError: wrong trailing shape, or NaN/infinite values.
        """
        a = torch.as_tensor(np.asarray(actions.detach().cpu() if isinstance(actions, torch.Tensor) else actions), dtype=torch.float32)
        if a.ndim < 2 or tuple(a.shape[-2:]) != (self.horizon, self.action_dim):
            raise ValueError(f"action chunks must have shape (..., {self.horizon}, {self.action_dim}), got {tuple(a.shape)}")
        if not torch.isfinite(a).all():
            raise ValueError("actions contain NaN or infinite values")
        lead = a.shape[:-2]
        residual = self.encoder((a / self.act_scale).reshape(-1, self.horizon * self.action_dim))
        codes = []
        for book in self.codebooks:  # residual VQ, nearest code by Euclidean distance per round
            d2 = (residual**2).sum(-1, keepdim=True) + (book**2).sum(-1)[None, :] - 2.0 * residual @ book.T
            c = d2.argmin(dim=-1)
            codes.append(c)
            residual = residual - book[c]
        codes_t = torch.stack(codes, dim=-1).reshape(*lead, self.groups)
        return (self.vocab_size - 1 - codes_t).numpy().astype(np.int64)

    @torch.no_grad()
    def decode_chunk(self, token_ids: Any) -> np.ndarray:
        """Action chunks of token ids.

        Args:
            token_ids: integer array-like (..., groups).

        Returns:
            float32 array (..., horizon, action_dim).

        Raises:
            ValueError: the last axis is not ``groups`` long, non-integer ids, or an id outside
                ``[token_begin, token_end)`` (the authors clip those silently; a policy that
                samples only action ids never produces one, so here it is an error).
        """
        ids = self._token_array(token_ids, self.groups)
        codes = torch.from_numpy(self.vocab_size - 1 - ids.astype(np.int64)).reshape(-1, self.groups)
        latent = sum(self.codebooks[q][codes[:, q]] for q in range(self.groups))
        out = self.decoder(latent) * self.act_scale
        return out.reshape(*ids.shape[:-1], self.horizon, self.action_dim).numpy().astype(np.float32)


def unnormalize_actions(actions: Any, q01: Any, q99: Any, mask: Any | None = None) -> np.ndarray:
    """Map normalised actions from [-1, 1] to the robot's range (OpenVLA's ``BOUNDS_Q99`` scheme).

    ``a_robot = (a + 1) / 2 * (q99 - q01) + q01`` on the dimensions where ``mask`` is true; the
    others (by OpenVLA's convention the gripper) pass through unchanged.

    Args:
        actions: float array-like (..., D) in [-1, 1].
        q01, q99: per-dimension 1st/99th percentiles of the training actions, shape (D,)
            (OpenVLA checkpoints: ``config.norm_stats[<dataset>]["action"]``).
        mask: bool (D,), which dimensions to un-normalise (default all).

    Returns:
        float32 array of the same shape.
    """
    a = np.asarray(actions, dtype=np.float64)
    lo, hi = np.asarray(q01, dtype=np.float64), np.asarray(q99, dtype=np.float64)
    m = np.ones(a.shape[-1], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    out = np.where(m, 0.5 * (a + 1.0) * (hi - lo) + lo, a)
    return out.astype(np.float32)


def load_action_stats(source: Any, unnorm_key: str | None = "libero_10") -> dict[str, np.ndarray]:
    """The action statistics a VLA checkpoint carries, for one dataset.

    OpenVLA/MiniVLA checkpoints store ``norm_stats = {dataset: {"action": {"q01", "q99", "mask",
    ...}, ...}}`` in their config (Hugging Face format: ``config.norm_stats``) and/or in a
    ``dataset_statistics.json`` beside the weights (fine-tuned and Prismatic-format runs). The
    dataset is chosen as the authors' LIBERO evaluation does (openvla-mini
    ``experiments/robot/libero/run_libero_eval.py`` l.105-117): ``unnorm_key``, else
    ``unnorm_key + "_no_noops"``; ``unnorm_key=None`` takes the only dataset
    (``modeling_prismatic.py`` ``_check_unnorm_key``).

    Args:
        source: a ``norm_stats`` dict, a checkpoint folder (``dataset_statistics.json``, else
            ``config.json``'s ``norm_stats``), or a model (``model.norm_stats`` or
            ``model.config.norm_stats``).
        unnorm_key: the dataset (the LIBERO suite name, e.g. ``"libero_10"``), or None.

    Returns:
        ``{"q01": float64 (D,), "q99": float64 (D,), "mask": bool (D,)}`` (mask all true when the
        checkpoint has none, as the authors default).

    Raises:
        FileNotFoundError: a folder without either file.
        KeyError: no statistics for the dataset, or an entry without ``"action"`` statistics (the
            message lists the datasets present and says where the file comes from).
    """
    stats: Any = None
    where = "the checkpoint's norm_stats"
    if isinstance(source, dict):
        stats = source
    elif isinstance(source, (str, Path)):
        folder = Path(source)
        ds, cfg = folder / "dataset_statistics.json", folder / "config.json"
        merged: dict[str, Any] = {}
        if cfg.is_file():
            merged.update(json.loads(cfg.read_text()).get("norm_stats") or {})
        if ds.is_file():
            merged.update(json.loads(ds.read_text()))
        if not ds.is_file() and not merged:
            raise FileNotFoundError(
                f"no action statistics in {folder}: expected dataset_statistics.json (written by the fine-tuning "
                "run next to its checkpoints) or a config.json with norm_stats"
            )
        stats, where = merged, f"{ds.name} / {cfg.name}'s norm_stats in {folder}"
    else:
        stats = getattr(source, "norm_stats", None) or getattr(getattr(source, "config", None), "norm_stats", None)
    if not stats:
        raise KeyError(
            "the checkpoint carries no action statistics (norm_stats), so its actions cannot be un-normalised: "
            "copy the fine-tuning run's dataset_statistics.json into the checkpoint folder"
        )
    if unnorm_key is None:
        if len(stats) != 1:
            raise KeyError(f"the checkpoint has statistics for several datasets, pick one as unnorm_key: {sorted(stats)}")
        key = next(iter(stats))
    elif unnorm_key in stats:
        key = unnorm_key
    elif f"{unnorm_key}_no_noops" in stats:
        key = f"{unnorm_key}_no_noops"
    else:
        raise KeyError(f"no action statistics for {unnorm_key!r} (nor {unnorm_key}_no_noops) in {where}; "
                       f"it has {sorted(stats)}: pass one of those as unnorm_key")
    if not isinstance(stats[key], dict) or "action" not in stats[key]:
        raise KeyError(f"the statistics of {key!r} in {where} have no 'action' entry (q01/q99)")
    act = stats[key]["action"]
    q01 = np.asarray(act["q01"], dtype=np.float64)
    return {
        "q01": q01,
        "q99": np.asarray(act["q99"], dtype=np.float64),
        "mask": np.asarray(act.get("mask", np.ones_like(q01, dtype=bool)), dtype=bool),
    }


def libero_env_actions(actions: Any, stats: dict[str, np.ndarray] | None) -> np.ndarray:
    """The actions LIBERO executes for a policy's normalised actions, as the authors' evaluation does.

    openvla-mini (and OpenVLA) LIBERO evaluation, per step: un-normalise with the checkpoint's
    q01/q99 on the masked dimensions (:func:`unnormalize_actions`; ``prismatic/models/vlas/openvla.py``
    l.98-105), then the gripper (last dimension), which the datasets store as 0 = close / 1 = open,
    goes from [0, 1] to [-1, +1] and is binarised with ``sign`` (``experiments/robot/robot_utils.py``
    ``normalize_gripper_action`` l.98-115, called with ``binarize=True``) and its sign flipped to
    LIBERO's -1 = open / +1 = close (``invert_gripper_action`` l.118-125;
    ``run_libero_eval.py`` l.245-251).

    Args:
        actions: float array-like (..., 7) of normalised actions (e.g. ``VLASamples.actions``).
        stats: from :func:`load_action_stats`, or None for a model without statistics (the tiny
            test models): the actions are then returned unchanged (float32).

    Returns:
        float32 array of the same shape. A gripper value of exactly 0.5 gives 0 (``sign(0)``, as
        the authors' code).

    Raises:
        ValueError: the last axis does not match the statistics' dimension.
    """
    a = np.asarray(actions, dtype=np.float64)
    if stats is None:
        return a.astype(np.float32)
    if a.ndim == 0 or a.shape[-1] != len(stats["q01"]):
        raise ValueError(f"actions must have shape (..., {len(stats['q01'])}) to match the statistics, got {a.shape}")
    out = unnormalize_actions(a, stats["q01"], stats["q99"], stats.get("mask")).astype(np.float64)
    out[..., -1] = -np.sign(2.0 * out[..., -1] - 1.0)
    return out.astype(np.float32)
