"""A timm VisionTransformer with prompts on chosen blocks, passed as forward arguments.

``PromptedViT(vit, prompt_layers=(0, 1, 2, 3, 4), gate="norga", activation="tanh")``
replaces ``vit.blocks[i].attn`` by :class:`PrefixAttention` for the chosen
blocks (reusing the original weights; state-dict keys unchanged) and runs
timm's own modules block by block (:mod:`norga.models.blockwise`), handing
each prompted block its prefix as an argument — so gradient checkpointing
(``vit.set_grad_checkpointing(True)``) works.

Prompts of one call (``model(x, prompts)``), see :mod:`norga.models.prompt_inputs`:

* ``None`` — the plain backbone (equal to timm's features to ~1e-6);
* a stacked prefix tensor (B, P, 2, L, H, Dh) — one length L on all P
  prompted blocks, as :class:`~norga.models.prompts.PromptPool` gathers it; a
  single (P, 2, L, H, Dh) prompt is broadcast to the whole batch;
* a :class:`PromptInput` — per-block prefixes of each block's own length,
  prepended prompt tokens and the pooling choice.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Union

from torch import Tensor, nn

from ..config import ConfigError
from . import blockwise
from ..gates.modules import Gate, GateFactory
from .compilation import backbone_function
from .precision import backbone_autocast
from .prefix_attention import PrefixAttention
from .prompt_inputs import PromptInput, PromptSpec, resolve_prompts

Prompts = Union[None, Tensor, PromptInput]

DEFAULT_PROMPT_LAYERS = (0, 1, 2, 3, 4)


class PromptedViT(nn.Module):
    """Frozen-backbone ViT whose prompted blocks take per-sample prompts as forward arguments.

    Args:
        vit: a timm ``VisionTransformer`` (any size / patch / image size).
        prompt_layers: indices of blocks that receive prefixes.
        gate: a :class:`~norga.gates.modules.GateFactory` (resolved once, called once per prompted block with
            its head count), or a gate registry name (``"linear"``, ``"norga"``, ...) with ``gate_options``.
        path: ``"fast"`` (SDPA) or ``"explicit"`` (reference math).
        **gate_options: with a gate name, e.g. ``activation="tanh"`` for NoRGa.
    """

    def __init__(
        self,
        vit: nn.Module,
        prompt_layers: Sequence[int] = DEFAULT_PROMPT_LAYERS,
        gate: Union[str, GateFactory] = "linear",
        path: str = "fast",
        **gate_options,
    ):
        super().__init__()
        blocks = getattr(vit, "blocks", None)
        if blocks is None or not hasattr(vit, "forward_features"):
            raise TypeError(f"expected a timm VisionTransformer, got {type(vit).__name__}")
        blockwise.check_runnable_vit(vit)
        depth = len(blocks)
        layers = tuple(int(i) for i in prompt_layers)
        bad = [i for i in layers if not 0 <= i < depth]
        if bad or len(set(layers)) != len(layers):
            raise ConfigError(
                f"method.prompt_layers {list(layers)} must be distinct block indices in [0, {depth - 1}]: "
                f"this backbone has {depth} blocks"
            )
        self.vit = vit
        self.prompt_layers = layers
        if not isinstance(gate, GateFactory):
            gate = GateFactory.from_options(gate, **gate_options)
        elif gate_options:
            raise TypeError(f"gate options {sorted(gate_options)} given beside a GateFactory: put them in its spec")
        self.gate_name = gate.name
        for i in layers:
            blockwise.check_prompted_block(blocks[i], i)
        for i in layers:
            blocks[i].attn = PrefixAttention(blocks[i].attn, gate(blocks[i].attn.num_heads), path)
        first = self.prefix_attentions[0] if layers else None
        self.num_heads = first.num_heads if first else blocks[0].attn.num_heads
        self.head_dim = first.head_dim if first else blocks[0].attn.head_dim
        self.embed_dim = vit.num_features
        self.spec = PromptSpec(layers, depth, self.num_heads, self.head_dim, getattr(vit, "embed_dim", self.embed_dim))

    @property
    def prefix_attentions(self) -> List[PrefixAttention]:
        return [self.vit.blocks[i].attn for i in self.prompt_layers]

    def prompt_shape(self, length: int) -> tuple:
        """Shape of one task's stacked prefix prompt: (P, 2, L, H, Dh)."""
        return (len(self.prompt_layers), 2, length, self.num_heads, self.head_dim)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """timm's switch: checkpoint every block (prefixes are checkpoint inputs)."""
        self.vit.set_grad_checkpointing(enable)

    # ---- parameters -------------------------------------------------
    def gate_parameters(self) -> Iterator[nn.Parameter]:
        for attn in self.prefix_attentions:
            yield from attn.prefix_gate.parameters()

    def freeze_backbone(self) -> None:
        """Freeze every backbone tensor; gates keep their current trainability."""
        gate_ids = {id(p) for p in self.gate_parameters()}
        for p in self.vit.parameters():
            if id(p) not in gate_ids:
                p.requires_grad_(False)

    @property
    def gates(self) -> List[Gate]:
        """The gate of every prompted block, in ``prompt_layers`` order."""
        return [attn.prefix_gate for attn in self.prefix_attentions]

    def gate_parameters_for(self, task: int) -> List[nn.Parameter]:
        """Unfreeze the gates that train on ``task`` (:meth:`Gate.trains_on`; NoRGa: the first task only),
        freeze the others, and return the trainable gates' parameters (empty for ``linear``)."""
        params: List[nn.Parameter] = []
        for gate in self.gates:
            if gate.trains_on(task):
                gate.unfreeze()
                params += list(gate.parameters())
            else:
                gate.freeze()
        return params

    def gate_values(self) -> Dict[str, List[float]]:
        """What each prompted block's gate reports, as lists over blocks (NoRGa: alpha, tau; linear: nothing)."""
        values: Dict[str, List[float]] = {}
        for gate in self.gates:
            for name, value in gate.report().items():
                values.setdefault(name, []).append(value)
        return values

    def gate_state(self) -> Dict[str, dict]:
        """Every gate's state dict, keyed by its position in ``prompt_layers`` ("0", "1", ...)."""
        return {str(i): gate.state_dict() for i, gate in enumerate(self.gates)}

    def load_gate_state(self, state: Dict[str, dict]) -> None:
        """Restore :meth:`gate_state` and freeze the gates (they train again only through
        :meth:`gate_parameters_for`)."""
        for i, gate in enumerate(self.gates):
            gate.load_state_dict(state[str(i)])
        self.freeze_gates()

    def freeze_gates(self) -> None:
        for attn in self.prefix_attentions:
            attn.prefix_gate.freeze()

    # ---- forward ----------------------------------------------------
    def resolve(self, prompts: Prompts, batch: int) -> PromptInput:
        """Validate ``prompts`` for a batch of ``batch`` images; broadcast batch dims of 1; drop empty ones.

        Bad shapes raise one ValueError naming the expected shape.
        """
        return resolve_prompts(prompts, batch, self.spec)

    def forward_features(self, x: Tensor, prompts: Prompts = None) -> Tensor:
        """Images (B, 3, H, W) -> token features (B, N + L_p, D) after timm's final norm.

        Token order: [class token, registers..., L_p prompt tokens, patches]
        (no prompt tokens: exactly timm's (B, N, D) layout).
        """
        return self._features(x, self.resolve(prompts, x.shape[0]))

    def forward(self, x: Tensor, prompts: Prompts = None) -> Tensor:
        """Images (B, 3, H, W) -> pre-logits features (B, D), pooled as ``prompts.pool`` says.

        Default pooling is timm's (class token); ``PromptInput(pool="prompt_mean")``
        averages the prompt tokens' outputs.
        """
        resolved = self.resolve(prompts, x.shape[0])
        return self.pool(self._features(x, resolved), resolved)

    def pool(self, features: Tensor, prompts: Optional[PromptInput] = None) -> Tensor:
        """Token features (B, N + L_p, D) from :meth:`forward_features` -> (B, D)."""
        resolved = prompts if prompts is not None else PromptInput()
        return blockwise.pool(self.vit, features, resolved.num_tokens, resolved.pool)

    def _features(self, x: Tensor, prompts: PromptInput) -> Tensor:
        """timm's blocks under the run's backbone autocast (:mod:`norga.models.precision`), compiled when the run
        says so (:mod:`norga.models.compilation`); fp32 out."""
        with backbone_autocast(x.device.type):
            tokens = backbone_function()(self.vit, x, prompts.prefixes, prompts.tokens, prompts.token_block)
        return tokens.float()
