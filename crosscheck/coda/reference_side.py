"""The reference side of the CODA-Prompt cross-check, run with the reference code's environment (timm 0.4.12):

    python -m crosscheck.coda.reference_side --ref CHECKOUT --saved DIR

CHECKOUT is GT-RIPL/CODA-Prompt, DIR what ``python -m crosscheck.coda.norga_side`` wrote. Nothing of the
reference is patched on disk:

* its ViT (BLIP's, ``models/vit.py``) has no layer scale, which DINOv2 has. The conversion folds each block's
  layer-scale vector into the linear layer before it (``attn.proj`` and ``mlp.fc2``: W <- diag(gamma) W,
  b <- gamma * b), which is exact, and loads the result with ``strict=True``;
* its two ``.cuda()`` calls (the prompt-loss accumulator, the orthogonality penalty's identity) become a copy on
  the CPU, in memory;
* ``ViTZoo`` is assembled around that ViT instead of downloading its ViT-B (its own forward is used).

Printed: frozen features, block 0's prefixes, prompted features and logits after 1, 3 and 5 tasks
(max |reference − norga|), and, after three training steps of the reference's own ``Prompt.update_model`` (its
class masking, data weights, prompt loss) with Adam as its ``init_optimizer`` builds it, the difference of every
trained tensor from norga's.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from crosscheck.harness.reference_cli import biggest, fold_layer_scale, reference_args

LAYERS = [0, 1, 2, 3, 4]


def zoo_model(ref: dict, saved: dict, pools: dict, head: dict):
    """The reference's ViTZoo around its ViT-S/14 at 56 px, with ``pools`` as its CODA components, keys and
    attention vectors of blocks 0-4 and ``head`` as its classifier."""
    vit = ref["VisionTransformer"](img_size=56, patch_size=14, embed_dim=384, depth=12, num_heads=6, ckpt_layer=0,
                                   drop_path_rate=0)
    vit.load_state_dict(fold_layer_scale(saved["state_dict"]), strict=True)
    zoo = ref["ViTZoo"].__new__(ref["ViTZoo"])
    nn.Module.__init__(zoo)
    zoo.prompt_flag, zoo.task_id, zoo.feat = "coda", None, vit.eval()
    zoo.last = nn.Linear(384, 50)
    zoo.last.load_state_dict(head)
    zoo.prompt = ref["CodaPrompt"](384, 5, [100, 8, 0.0], key_dim=384)
    for j, block in enumerate(LAYERS):
        setattr(zoo.prompt, f"e_p_{block}", nn.Parameter(pools["components"][j].clone()))
        setattr(zoo.prompt, f"e_k_{block}", nn.Parameter(pools["keys"][j].clone()))
        setattr(zoo.prompt, f"e_a_{block}", nn.Parameter(pools["attention"][j].clone()))
    return zoo


@torch.no_grad()
def forward_check(ref: dict, saved: dict) -> None:
    zoo = zoo_model(ref, saved, saved["pools"], saved["head"]).eval()
    x = saved["images"]
    query = zoo.feat(x)[0][:, 0]
    print("CODA frozen class-token features, max |ref - norga|:", f"{biggest(query, saved['query']):.1e}")
    for learned in (1, 3, 5):
        zoo.prompt.task_count = learned - 1
        (pk, pv), _, _ = zoo.prompt.forward(query, 0, None, train=False)
        split = lambda p: p.reshape(len(x), -1, 6, 64).permute(0, 2, 1, 3)  # noqa: E731 - as its Attention does
        ours = saved["after"][learned]
        print(f"CODA after {learned} task(s): block-0 prefix keys {biggest(split(pk), ours['prefix0'][0]):.1e}, "
              f"values {biggest(split(pv), ours['prefix0'][1]):.1e}; prompted features "
              f"{biggest(zoo(x, pen=True), ours['features']):.1e}; logits {biggest(zoo(x), ours['logits']):.1e}")


def training_steps(ref: dict, saved: dict) -> None:
    steps = saved["steps"]
    zoo = zoo_model(ref, saved["forward"], steps["initial"], steps["initial_head"])
    zoo.prompt.task_count = 0
    params = list(zoo.prompt.parameters()) + list(zoo.last.parameters())  # what its init_optimizer passes
    learner = SimpleNamespace(model=zoo, valid_out_dim=10, last_valid_out_dim=0, dw_k=torch.ones(11),
                              criterion_fn=nn.CrossEntropyLoss(reduction="none"),
                              optimizer=torch.optim.Adam(params, lr=1e-3, weight_decay=0, betas=(0.9, 0.999)))
    learner.criterion = lambda logits, targets, weights: ref["NormalNN"].criterion(learner, logits, targets, weights)
    zoo.train()  # as its learn_batch
    x, y = steps["images"], steps["labels"]
    for i in range(0, len(x), 20):
        ref["Prompt"].update_model(learner, x[i:i + 20], y[i:i + 20])
    n = steps["per_task"]
    for name, short in (("components", "p"), ("keys", "k"), ("attention", "a")):
        diff = max(biggest(getattr(zoo.prompt, f"e_{short}_{b}").detach()[:n], steps["trained"][name][j][:n])
                   for j, b in enumerate(LAYERS))
        moved = biggest(steps["trained"][name][:, :n], steps["initial"][name][:, :n])
        print(f"CODA 3 training steps, {name}: max |ref - norga| {diff:.1e} (moved {moved:.1e})")
    moved = biggest(steps["trained_head"]["weight"], steps["initial_head"]["weight"])
    print(f"CODA 3 training steps, head: max |ref - norga| "
          f"{biggest(zoo.last.weight.detach(), steps['trained_head']['weight']):.1e} (moved {moved:.1e})")


def gram_schmidt_check(ref: dict, checkpoint: Path) -> None:
    """Its Gram-Schmidt draw of task 2's components after tasks 0-1 were trained (``checkpoint``: its
    ``models/repeat-1/task-2/class.pth`` of a run on the small task): how orthogonal the new rows are to the
    learned ones (max |cos|) and to each other (max |G - I|). norga's draw gives 0 up to float precision."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    prompt = ref["CodaPrompt"](384, 5, [100, 8, 0.0], key_dim=384)
    for name, value in state.items():
        if name.startswith("prompt.e_"):
            setattr(prompt, name[len("prompt."):], nn.Parameter(value.clone()))
    prompt.task_count = 1
    torch.manual_seed(0)  # its draw uses the global generator
    prompt.process_task_count()  # task_count 2: draws rows [40, 60) against rows [0, 40)
    for kind, label in (("p", "components"), ("k", "keys"), ("a", "attention")):
        cross = gram = 0.0
        for block in LAYERS:
            old = state[f"prompt.e_{kind}_{block}"][:40].flatten(1)
            new = getattr(prompt, f"e_{kind}_{block}").detach()[40:60].flatten(1)
            unit = lambda m: m / m.norm(dim=1, keepdim=True)  # noqa: E731
            cross = max(cross, float((unit(new) @ unit(old).T).abs().max()))
            gram = max(gram, float((new @ new.T - torch.eye(len(new))).abs().max()))
        print(f"CODA Gram-Schmidt of task 2, {label}: max |cos(new, learned)| {cross:.3f}, max |G - I| {gram:.3f}")


def main(argv=None) -> int:
    gram_schmidt = lambda p: p.add_argument(  # noqa: E731
        "--gram-schmidt", type=Path, default=None, metavar="CHECKPOINT",
        help="also measure its Gram-Schmidt draw on a trained task-2 checkpoint (class.pth)")
    args = reference_args(__doc__, "GT-RIPL/CODA-Prompt", "crosscheck.coda.norga_side", argv, gram_schmidt)
    torch.Tensor.cuda = lambda self, *a, **k: self.clone()  # its two .cuda() calls, on the CPU (in memory)
    from learners.default import NormalNN
    from learners.prompt import Prompt
    from models.vit import VisionTransformer
    from models.zoo import CodaPrompt, ViTZoo

    ref = {"VisionTransformer": VisionTransformer, "ViTZoo": ViTZoo, "CodaPrompt": CodaPrompt, "Prompt": Prompt,
           "NormalNN": NormalNN}
    saved = torch.load(args.saved / "norga_coda.pt", weights_only=False)
    forward_check(ref, saved["forward"])
    training_steps(ref, saved)
    if args.gram_schmidt:
        gram_schmidt_check(ref, args.gram_schmidt)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
