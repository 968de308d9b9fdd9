"""The reference side of the SLCA cross-check, run with a reference environment (timm 0.6.7):

    python -m crosscheck.slca.reference_side --ref CHECKOUT --saved DIR

CHECKOUT is GengDavid/SLCA, DIR what ``python -m crosscheck.slca.norga_side`` wrote. Its own classes run:
``convs.vits.VisionTransformer`` built as DINOv2 ViT-S/14 at 56 px with norga's converted weights,
``utils.inc_net.FinetuneIncrementalNet`` around it (its ``SimpleContinualLinear`` heads set to norga's initial
values), and ``models.slca.SLCA``'s ``_stage1_training`` (3 fixed batches, 1 epoch), ``_compute_class_mean`` and
``_stage2_compact_classifier`` (2 epochs). Patched in memory, nothing on disk:

* every block gets DINOv2's layer scale (``ls1``, ``ls2``: x + gamma * attn(...), x + gamma * mlp(...)), which
  its ``Block`` lacks; the gammas load from norga's weights and train like every other tensor;
* its data loaders take lists of batches (``_compute_class_mean``'s ``DataLoader`` with ``num_workers=0``);
* ``MultivariateNormal`` and ``torch.randperm`` inside ``_stage2_compact_classifier`` return norga's recorded
  draws (the stub checks the mean and covariance it is given against norga's s_c mu_c and Sigma_c).

Printed: max |ref - norga| of every compared tensor, with how far training moved it.
"""
from __future__ import annotations

from functools import partial
from types import MethodType, SimpleNamespace

import torch
from torch import nn

from crosscheck.harness.reference_cli import biggest, reference_args


def layer_scaled(vit) -> None:
    """Give every reference block DINOv2's layer scale (gamma parameters ls1.gamma, ls2.gamma)."""
    def forward(block, x):
        x = x + block.drop_path(block.ls1.gamma * block.attn(block.norm1(x)))
        return x + block.drop_path(block.ls2.gamma * block.mlp(block.norm2(x)))

    for block in vit.blocks:
        dim = block.norm1.normalized_shape[0]
        block.ls1, block.ls2 = nn.Module(), nn.Module()
        block.ls1.gamma, block.ls2.gamma = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        block.forward = MethodType(forward, block)


def network(ref: dict, backbone: dict):
    vit = ref["VisionTransformer"](img_size=56, patch_size=14, embed_dim=384, depth=12, num_heads=6, mlp_ratio=4.0,
                                   qkv_bias=True, num_classes=0, norm_layer=partial(nn.LayerNorm, eps=1e-6))
    layer_scaled(vit)
    missing, unexpected = vit.load_state_dict(backbone, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    net = ref["FinetuneIncrementalNet"].__new__(ref["FinetuneIncrementalNet"])
    nn.Module.__init__(net)
    net.convnet, net.fc, net.old_fc, net.fc_with_ln, net.fc_scale_mu = vit, None, None, False, -1
    return net


def learner(ref: dict, net, saved: dict):
    slca = ref["SLCA"].__new__(ref["SLCA"])
    c = saved["config"]
    slca.__dict__.update(_network=net, _cur_task=-1, _known_classes=0, _total_classes=0, _device="cpu",
                         _multiple_gpus=["cpu"], bcb_lrscale=c["backbone_lr_scale"], fix_bcb=False,
                         logit_norm=c["ca_logit_norm"], task_sizes=[], topk=1, log_path="logs/slca")
    module = ref["module"]
    module.epochs, module.lrate, module.weight_decay, module.ca_epochs = 1, c["lr"], c["weight_decay"], c["ca_epochs"]
    assert c["momentum"] == 0.9 and c["ca_lr"] == c["lr"] and c["ca_samples_per_class"] == 256  # its constants
    return slca


def report(name: str, ref_tensor, norga_tensor, start=None) -> None:
    moved = "" if start is None else f" (moved {biggest(norga_tensor, start):.1e})"
    print(f"  {name}: {biggest(ref_tensor, norga_tensor):.1e}{moved}")


def run_task(slca, task: int, saved: dict) -> None:
    mine = saved[f"task{task}"]
    net = slca._network
    net.update_fc(10)
    with torch.no_grad():
        net.fc.heads[task][0].load_state_dict(mine["head_init"])
    slca._cur_task, slca._known_classes, slca._total_classes = task, 10 * task, 10 * task + 10
    slca.task_sizes.append(10)
    x, y = mine["images"], mine["labels"]
    batches = [(None, x[i:i + 16], y[i:i + 16]) for i in (0, 16, 32)]
    old_heads = [{k: v.clone() for k, v in net.fc.heads[t][0].state_dict().items()} for t in range(task)]
    slca._stage1_training(batches, None)
    print(f"task {task}: 3 slow-learner batches, max |ref - norga|")
    after = {k: v for k, v in net.convnet.state_dict().items()}
    worst = max(after, key=lambda k: biggest(after[k], mine["backbone_after"][k]))
    report(f"backbone ({len(after)} tensors; worst {worst})", after[worst], mine["backbone_after"][worst],
           mine["backbone_before"][worst])
    moved = max(biggest(mine["backbone_after"][k], mine["backbone_before"][k]) for k in after)
    print(f"  backbone: largest move of any tensor {moved:.1e}")
    for key, value in net.fc.heads[task][0].state_dict().items():
        report(f"head {task} {key}", value, mine["heads_after"][f"heads.{task}.{key}"], mine["head_init"][key])
    for t in range(task):  # old heads: untouched on both sides
        for key, value in net.fc.heads[t][0].state_dict().items():
            assert torch.equal(value, old_heads[t][key]), (t, key)
            report(f"head {t} {key} (old, frozen)", value, mine["heads_after"][f"heads.{t}.{key}"])
    manager = SimpleNamespace(get_dataset=lambda cls, **kw: (None, None, [
        (None, x[y == int(cls[0])], y[y == int(cls[0])])]))
    slca._compute_class_mean(manager)
    means = torch.tensor(slca._class_means[10 * task:10 * task + 10])
    report("class means", means, mine["means"])
    report("class covariances (+1e-4 I)", slca._class_covs[10 * task:10 * task + 10].double(), mine["covs"])
    print(f"  (largest |mean| {float(mine['means'].abs().max()):.1f}, largest |covariance| "
          f"{float(mine['covs'].abs().max()):.1f})")


def heads_state(fc) -> dict:
    """Its SimpleContinualLinear's tensors under norga's TaskHeads names (heads.T.0.weight -> heads.T.weight)."""
    return {f"heads.{t}.{k}": v for t, head in enumerate(fc.heads) for k, v in head[0].state_dict().items()}


class RecordedNormal:
    """Stand-in for MultivariateNormal: checks its mean and covariance, returns norga's samples of that class."""

    draws, epoch, classes, errors = [], 0, 0, {"mean": 0.0, "cov": 0.0}

    def __init__(self, mean, cov):
        cls = RecordedNormal
        c = cls.classes % 20
        draw = cls.draws[cls.epoch]
        rows = draw["samples"][draw["labels"] == c]
        cls.expected_mean, cls.rows = rows.mean(0), rows
        cls.errors["mean"] = max(cls.errors["mean"], biggest(mean.double(), cls.targets["mean"][c]))
        cls.errors["cov"] = max(cls.errors["cov"], biggest(cov.double(), cls.targets["cov"][c]))
        cls.classes += 1
        if cls.classes % 20 == 0:
            cls.epoch += 1

    def sample(self, sample_shape):
        return RecordedNormal.rows.clone()


def check_alignment(ref: dict, slca, saved: dict) -> None:
    draws = saved["draws"]
    covs = torch.cat([saved["task0"]["covs"], saved["task1"]["covs"]])
    means = torch.cat([saved["task0"]["means"], saved["task1"]["means"]])
    m = saved["config"]["ca_mean_shrink"]
    scales = torch.tensor([1 - m + m * (c // 10 + 1) / 2 for c in range(20)], dtype=torch.float64)
    RecordedNormal.draws, RecordedNormal.targets = draws, {"mean": means * scales[:, None], "cov": covs}
    orders = [d["order"] for d in draws]
    randperm = torch.randperm
    ref["module"].MultivariateNormal = RecordedNormal
    torch.randperm = lambda n, *a, **k: orders.pop(0)
    x = saved["forward_images"]
    slca.test_loader = [(None, x, torch.zeros(len(x), dtype=torch.long))]
    slca._network.fc.backup()
    try:
        slca._stage2_compact_classifier(10)
    finally:
        torch.randperm = randperm
    print(f"alignment ({saved['config']['ca_epochs']} epochs, norga's draws): mean given to the sampler "
          f"{RecordedNormal.errors['mean']:.1e}, covariance {RecordedNormal.errors['cov']:.1e}")
    for key, value in heads_state(slca._network.fc).items():
        report(f"aligned {key}", value, saved["aligned"][key], saved["task1"]["heads_after"][key])
    slca._network.fc.recall()
    recalled = heads_state(slca._network.fc)
    print("after its recall() (norga: ca_heads restore), max |ref - norga| of the heads the next task starts from:",
          f"{max(biggest(v, saved['task1']['heads_after'][k]) for k, v in recalled.items()):.1e}")


def main(argv=None) -> int:
    args = reference_args(__doc__, "GengDavid/SLCA", "crosscheck.slca.norga_side", argv)
    import models.base as base
    import models.slca as module
    from convs.vits import VisionTransformer
    from utils.inc_net import FinetuneIncrementalNet

    base.DataLoader = lambda dataset, **kw: dataset  # the fake data manager's dataset is already a list of batches
    ref = {"VisionTransformer": VisionTransformer, "FinetuneIncrementalNet": FinetuneIncrementalNet,
           "SLCA": module.SLCA, "module": module}
    saved = torch.load(args.saved / "norga_slca.pt", weights_only=False)
    net = network(ref, saved["task0"]["backbone_before"])
    with torch.no_grad():
        net.update_fc(10)
        net.fc.heads[0][0].load_state_dict(saved["task0"]["head_init"])
        out = net.eval()(saved["forward_images"])
    print("forward (16 test images, initial weights), max |ref - norga|")
    report("features", out["features"], saved["forward_features"])
    report("logits of head 0", out["logits"], saved["forward_logits"])
    net.fc = None
    slca = learner(ref, net, saved)
    for task in (0, 1):
        run_task(slca, task, saved)
    check_alignment(ref, slca, saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
