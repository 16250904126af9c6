"""bertwb.fast's CPU pieces give what the plain PyTorch pieces of bertwb.model.bert give.

* attention with dropout (`fast.attention.attention_with_dropout`) against plain softmax attention, with
  and without a padding mask: the same dropout masks from the same seed, the same gradients;
* the dropout drawn as positions (`fast.dropout.dropout`): its drop rate, scale, gradient and determinism under a
  seed; the positions' independence (`dropped_positions`); its residual sum (`fast.dropout.residual_dropout`)
  against ``x + dropout(y)``;
* the oneDNN Linear (`fast.linear.OneDnnLinear`) against ``F.linear``: outputs and the three gradients, through
  oneDNN in fp32 on CPU and through ``F.linear`` under autocast, in float64 and with oneDNN switched off;
* the MLM head's (V, n) output layout (`fast.mlm.TransposedMLMHead`) against the plain (n, V) one;
* the MLM loss's fast branch (`fast.mlm.VocabCrossEntropy`) against its plain one (`F.cross_entropy`,
  `argmax` accuracy, in `bertwb.tasks.losses.masked_lm`), ties
  included, and the gradients it hands to the head;
* `fast.install` keeps parameters, ties and state-dict names, and leaves evaluation outputs as they were;
  `fast.for_inference` puts only the Linear layers on oneDNN, on CPU, without a graph;
* `fast.choose` installs them on CPU only, and only when asked; the trainer trains a model as it comes;
* one whole training step of the trainer with the fast pieces against the reference step (plain
  attention, the plain loss, the per-tensor AdamW), from the same weights and dropout seed.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

from bertwb import fast
from bertwb.config import Config
from bertwb.data.batching import Batches
from bertwb.data.pair_batches import PairBatch
from bertwb.fast.attention import attention_with_dropout
from bertwb.fast import linear as fast_linear
from bertwb.fast import mlm as fast_mlm
from bertwb.fast.dropout import dropout, dropped_positions, residual_dropout
from bertwb.fast.mlm import VocabCrossEntropy, mlm_loss_sum
from bertwb.model.bert import BertConfig, BertForPreTraining
from bertwb.tasks import losses
from bertwb.tasks.pretraining.objective import PretrainingObjective
from bertwb import cpuinfo
from bertwb.train.trainer import Trainer
from conftest import stand_in_pairs

VOCAB = 1000


def _heads(batch=3, heads=2, seq=12, dim=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, seq, heads, dim, generator=gen).transpose(1, 2).requires_grad_() for _ in range(3)]


def _plain_attention(q, k, v, mask, p):
    """softmax(q kᵀ / √d) over the keys ``mask`` keeps, dropped out by the fast dropout, times v."""
    scores = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return dropout(torch.softmax(scores, dim=-1), p) @ v


@pytest.mark.parametrize("masked", [False, True])
def test_attention_with_dropout_is_plain_attention_with_the_same_masks(masked):
    q, k, v = _heads()
    mask = None
    if masked:
        keep = torch.ones(3, 12, dtype=torch.bool)
        keep[1, 9:] = keep[2, 5:] = False
        mask = keep[:, None, None, :]
    torch.manual_seed(7)
    ours = attention_with_dropout(q, k, v, mask, 0.1)
    ours_grads = torch.autograd.grad(ours.square().sum(), (q, k, v))
    torch.manual_seed(7)
    theirs = _plain_attention(q, k, v, mask, 0.1)
    theirs_grads = torch.autograd.grad(theirs.square().sum(), (q, k, v))
    no_dropout = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (theirs - no_dropout).abs().max() > 0.1  # dropout dropped something, so equal outputs mean equal masks
    torch.testing.assert_close(_plain_attention(q, k, v, mask, 0.0), no_dropout, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    for a, b in zip(ours_grads, theirs_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("masked", [False, True])
def test_attention_s_hand_written_backward_is_the_derivative_of_its_forward(masked):
    """gradcheck in float64: the analytic gradients of `_DroppedAttention` (written from the kept and the whole
    probabilities, no mask) against finite differences, the dropout masks held by a seed at every call."""
    q, k, v = (t.detach().double().requires_grad_() for t in _heads(batch=2, seq=6, dim=4))
    mask = None
    if masked:
        keep = torch.ones(2, 6, dtype=torch.bool)
        keep[1, 4:] = False
        mask = keep[:, None, None, :]

    def seeded(q, k, v):
        torch.manual_seed(3)
        return attention_with_dropout(q, k, v, mask, 0.3)

    assert (seeded(q, k, v) - _plain_attention(q, k, v, mask, 0.0)).abs().max() > 0.01  # something was dropped
    assert torch.autograd.gradcheck(seeded, (q, k, v), eps=1e-6, atol=1e-7)


def test_attention_with_dropout_runs_in_bf16_under_autocast_as_the_plain_path_does():
    q, k, v = (t.detach().bfloat16().requires_grad_() for t in _heads())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.manual_seed(7)
        ours = attention_with_dropout(q, k, v, None, 0.1)
        torch.manual_seed(7)
        theirs = _plain_attention(q, k, v, None, 0.1)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    torch.testing.assert_close(ours, theirs, atol=2e-2, rtol=2e-2)
    grads = torch.autograd.grad(ours.float().square().sum(), (q, k, v))
    plain = torch.autograd.grad(theirs.float().square().sum(), (q, k, v))
    for a, b in zip(grads, plain, strict=True):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a.float(), b.float(), atol=5e-2, rtol=5e-2)


def test_dropout_drops_its_share_keeps_the_mean_and_masks_the_gradient():
    x = torch.rand(1000, 1000) + 0.5  # positive, so a zero output is a dropped element
    x.requires_grad_()
    torch.manual_seed(0)
    y = dropout(x, 0.1)
    dropped = y == 0
    assert abs(dropped.float().mean().item() - 0.1) < 0.002  # 1M draws: ±0.002 is 6.7 standard deviations
    torch.testing.assert_close(y[~dropped], x[~dropped] / 0.9)  # the exact rate, so the exact scale
    assert abs(y.mean().item() / x.mean().item() - 1) < 0.003  # expectation kept
    (grad,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(grad, (~dropped).float() / 0.9)
    torch.manual_seed(0)
    assert torch.equal(dropout(x, 0.1), y)  # torch's generator decides: a seed repeats the positions
    assert not torch.equal(dropout(x, 0.1), y)
    assert dropout(x, 0.0) is x and dropout(x, 0.1, training=False) is x
    assert torch.equal(dropout(x.detach(), 1.0), torch.zeros_like(x))
    transposed = x.detach().t()  # not contiguous: positions count in the tensor's own order, as a mask's would
    torch.manual_seed(1)
    ours = dropout(transposed, 0.1)
    torch.manual_seed(1)
    assert torch.equal(ours, dropout(transposed.contiguous(), 0.1))


@pytest.mark.parametrize("p", [0.02, 0.1, 0.5, 0.7, 0.97])
def test_dropped_positions_drop_each_element_independently_at_rate_p(p):
    """Drawn as gaps, the positions must still be independent Bernoulli(p) decisions: the rate, the rate in every
    stretch (no drift along the tensor), the chance that an element is dropped after a dropped one (no
    correlation between neighbours), and the lengths of kept runs (geometric); p above ½ draws the kept ones."""
    torch.manual_seed(int(p * 100))
    n = 400_000
    positions = dropped_positions(n, p)
    assert positions.dtype == torch.int64 and bool((positions[1:] > positions[:-1]).all())  # increasing, distinct
    assert 0 <= int(positions[0]) and int(positions[-1]) < n
    drops = torch.zeros(n, dtype=torch.bool).index_fill_(0, positions, True)
    sd = (p * (1 - p) / n) ** 0.5
    assert abs(drops.float().mean().item() - p) < 6 * sd
    quarters = drops.view(4, -1).float().mean(1)
    assert bool(((quarters - p).abs() < 6 * 2 * sd).all()), quarters
    after_drop = drops[1:][drops[:-1]].float().mean().item()  # P(drop | the element before was dropped)
    assert abs(after_drop - p) < 6 * (p * (1 - p) / (n * p)) ** 0.5
    gaps = torch.diff(positions) - 1  # kept elements between two dropped ones: geometric, P(gap = 0) = p
    assert abs((gaps == 0).float().mean().item() - p) < 6 * (p * (1 - p) / gaps.numel()) ** 0.5
    assert abs(gaps.float().mean().item() - (1 - p) / p) < 6 * ((1 - p) / p ** 2 / gaps.numel()) ** 0.5


def test_dropped_positions_at_the_edges():
    assert dropped_positions(0, 0.1).numel() == 0 and dropped_positions(10, 0.0).numel() == 0
    assert torch.equal(dropped_positions(7, 1.0), torch.arange(7))
    assert all(bool((dropped_positions(3, 0.4) < 3).all()) for _ in range(200))  # never past the end
    torch.manual_seed(3)
    first = dropped_positions(5_000, 0.3)
    torch.manual_seed(3)
    assert torch.equal(dropped_positions(5_000, 0.3), first)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_residual_dropout_is_the_sum_with_dropout_s_decisions(dtype):
    """x + dropout(y) in one function, as the packed encoder takes its residual sums: the same elements dropped
    from the same seed as `dropout`, the same scale, the gradient whole to x and masked to y, in y's dtype."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(300, 70, generator=gen).requires_grad_()
    y = (torch.rand(300, 70, generator=gen) + 0.5).to(dtype).requires_grad_()
    grad = torch.randn(300, 70, generator=gen)
    torch.manual_seed(5)
    ours = residual_dropout(x, y, 0.2)
    ours_grads = torch.autograd.grad(ours, (x, y), grad)
    torch.manual_seed(5)
    theirs = x + dropout(y, 0.2)
    theirs_grads = torch.autograd.grad(theirs, (x, y), grad)
    assert ours.dtype == theirs.dtype == torch.float32
    assert abs((ours.detach() == x.detach()).float().mean().item() - 0.2) < 0.01  # a fifth of y dropped
    tolerance = {} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}  # theirs rounds y · scale to bf16
    torch.testing.assert_close(ours, theirs, **tolerance)
    assert ours_grads[1].dtype == dtype
    for a, b in zip(ours_grads, theirs_grads, strict=True):
        torch.testing.assert_close(a, b, **tolerance)
    assert torch.equal(residual_dropout(x, y, 0.2, training=False), x + y)
    assert torch.equal(residual_dropout(x, y, 0.0), x + y)


def _count_onednn_products(monkeypatch) -> list[tuple[int, ...]]:
    """The shapes of the inputs `fast.linear` hands to oneDNN from now on, one entry per product."""
    calls: list[tuple[int, ...]] = []
    product = fast_linear.onednn_product

    def counted(x, weight, bias):
        calls.append(tuple(x.shape))
        return product(x, weight, bias)

    monkeypatch.setattr(fast_linear, "onednn_product", counted)
    monkeypatch.setattr(fast_mlm, "onednn_product", counted)
    return calls


@pytest.mark.skipif(not fast_linear.onednn_available(), reason="this torch has no oneDNN")
@pytest.mark.parametrize("case", ["3d", "strided input", "no bias", "frozen input"])
def test_onednn_linear_gives_linear_s_outputs_and_gradients(case, monkeypatch):
    gen = torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(24, 40, bias=case != "no bias")
    leaf = torch.randn(5, 7, 24, generator=gen).requires_grad_(case != "frozen input")
    upstream = torch.randn(5, 40 if case == "strided input" else 7 * 40, generator=gen)  # an arbitrary gradient
    results = []
    for cls in (torch.nn.Linear, fast_linear.OneDnnLinear):
        layer.__class__ = cls
        for t in (leaf, *layer.parameters()):
            t.grad = None
        calls = _count_onednn_products(monkeypatch)
        x = leaf[:, 0] if case == "strided input" else leaf  # (5, 24) with a row stride of 7·24, or (5, 7, 24)
        out = layer(x)
        (out.reshape(5, -1) * upstream).sum().backward()
        bias_grad = layer.bias.grad if layer.bias is not None else None
        results.append((out.detach(), leaf.grad, layer.weight.grad, bias_grad))
        assert len(calls) == (0 if cls is torch.nn.Linear else 1 if case == "frozen input" else 2), calls
    for name, plain, ours in zip(("output", "input grad", "weight grad", "bias grad"), *results, strict=True):
        if plain is None:
            assert ours is None, name
        else:
            torch.testing.assert_close(ours, plain, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.filterwarnings("ignore:TF32 acceleration")  # torch's flags() restores a GPU-only setting too
def test_onednn_linear_is_linear_under_autocast_in_float64_and_with_onednn_off(monkeypatch):
    layer = torch.nn.Linear(16, 8)
    plain = copy.deepcopy(layer)
    layer.__class__ = fast_linear.OneDnnLinear
    calls = _count_onednn_products(monkeypatch)
    x = torch.randn(6, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16
        torch.testing.assert_close(layer(x), plain(x))
    assert torch.equal(layer.double()(x.double()), plain.double()(x.double()))
    with torch.backends.mkldnn.flags(enabled=False):
        assert torch.equal(layer.float()(x), plain.float()(x))
    assert calls == []


@pytest.mark.skipif(not fast_linear.onednn_available(), reason="this torch has no oneDNN")
def test_fp32_products_leave_onednn_for_mkl_on_an_intel_cpu_and_give_linear_s_numbers(monkeypatch):
    """By maker: oneDNN on AMD's CPUs and any other, MKL (``nn.Linear``, ``addmm``) on Intel's, where MKL measured
    faster; ``$BERTWB_CPU_VENDOR`` names the maker (the suite's is AMD's), else /proc/cpuinfo does."""
    assert fast_linear.onednn_preferred("AuthenticAMD") and not fast_linear.onednn_preferred("GenuineIntel")
    assert cpuinfo.cpu_vendor() == "AuthenticAMD" and fast_linear.onednn_preferred()  # conftest's maker
    monkeypatch.setenv(cpuinfo.VENDOR_ENV, "GenuineIntel")
    assert not fast_linear.onednn_preferred()
    torch.manual_seed(0)
    plain = BertForPreTraining(BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=1, num_heads=2,
                                          intermediate_size=64)).train()
    model = fast.install(copy.deepcopy(plain))
    calls = _count_onednn_products(monkeypatch)
    layer, x = model.bert.layers[0].ffn.up, torch.randn(6, 32, requires_grad=True)
    assert isinstance(layer, fast_linear.OneDnnLinear)
    assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))  # MKL's own numbers
    h = torch.randn(7, 32, requires_grad=True)
    logits = model.mlm_head.logits(h)  # the fast layout, through addmm
    assert logits.t().is_contiguous()
    torch.testing.assert_close(logits, plain.mlm_head.logits(h), atol=1e-5, rtol=1e-5)
    logits.sum().backward()
    assert calls == []


@pytest.mark.parametrize("onednn", [True, False])
def test_mlm_head_output_layout_does_not_change_the_logits_or_gradients(onednn, monkeypatch):
    torch.manual_seed(0)
    model = fast.install(BertForPreTraining(BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=1, num_heads=2,
                                                       intermediate_size=64)).eval())
    if not onednn:  # MKL's addmm in the same layout, as on a torch without oneDNN
        monkeypatch.setattr(fast_mlm, "onednn_preferred", lambda: False)
    calls = _count_onednn_products(monkeypatch)
    head = model.mlm_head
    with torch.no_grad():
        head.bias.normal_()
    h = torch.randn(7, 32, requires_grad=True)
    upstream = torch.randn(7, VOCAB)
    logits = head.logits(h)  # with gradients: the (V, n) layout, seen as (n, V)
    assert logits.shape == (7, VOCAB) and logits.t().is_contiguous()
    (logits * upstream).sum().backward()
    ours = [t.grad.clone() for t in (h, head.decoder.weight, head.bias)]
    assert len(calls) == (2 if onednn and fast_linear.onednn_available() else 0)  # scores, weight gradient
    with torch.no_grad():
        plain = head.logits(h)  # without: the plain contiguous (n, V) logits
    assert plain.is_contiguous()
    torch.testing.assert_close(logits, plain, atol=1e-5, rtol=1e-5)
    for t in (h, head.decoder.weight, head.bias):
        t.grad = None
    (torch.nn.functional.linear(h, head.decoder.weight, head.bias) * upstream).sum().backward()
    for name, mine, theirs in zip(("h", "weight", "bias"), ours, (h.grad, head.decoder.weight.grad, head.bias.grad),
                                  strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-4, rtol=1e-5, msg=name)


def _logits_and_reference(n=40, seed=0, plant_hits=True):
    gen = torch.Generator().manual_seed(seed)
    weight = (torch.randn(VOCAB, 16, generator=gen) * 0.5).requires_grad_()
    h = torch.randn(n, 16, generator=gen).requires_grad_()
    labels = torch.randint(0, VOCAB, (n,), generator=gen)
    if plant_hits:
        with torch.no_grad():
            labels[::2] = (h @ weight.t()).argmax(-1)[::2]  # half the rows predicted right
    return weight, h, labels


def test_vocab_cross_entropy_matches_cross_entropy_hits_and_gradients():
    """The MLM loss's fast branch (`mlm_loss_sum`) gives its plain branch's (F.cross_entropy, argmax) numbers."""
    weight, h, labels = _logits_and_reference()
    reference = h @ weight.t()
    ref_loss, ref_hits = losses.masked_lm(reference, labels, fast=False)
    ref_grads = torch.autograd.grad(ref_loss * 0.3, (weight, h))

    loss, hits = losses.masked_lm((weight @ h.t()).t(), labels, fast=True)  # the layout TransposedMLMHead returns
    grads = torch.autograd.grad(loss * 0.3, (weight, h))
    assert int(hits) == int(ref_hits) >= 20
    torch.testing.assert_close(loss, ref_loss, atol=1e-4, rtol=1e-5)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_vocab_cross_entropy_counts_a_tied_maximum_as_argmax_does():
    logits = torch.zeros(3, 10)  # (n, V)
    logits[0, [2, 5]] = 1.0  # tie between 2 and 5: argmax says 2
    logits[1, 4] = 3.0
    labels = torch.tensor([5, 4, 0])  # row 0 misses (argmax 2), row 1 hits, row 2 hits (all equal: argmax 0)
    expected = int((logits.argmax(-1) == labels).sum())
    x = logits.t().contiguous().requires_grad_()
    _, hits = VocabCrossEntropy.apply(x * 1.0, labels)  # a non-leaf (V, n) input, as in training
    assert int(hits) == expected == 2


def test_vocab_cross_entropy_counts_ties_across_blocks_as_argmax_does(monkeypatch):
    monkeypatch.setattr(VocabCrossEntropy, "BLOCK", 6)  # 3 columns: blocks of 2 vocabulary rows
    logits = torch.zeros(3, 10)  # (n, V)
    logits[0, [3, 8]] = 2.0  # tie across blocks 1 and 4: argmax says 3
    logits[1, [4, 5]] = 2.0  # tie inside block 2: argmax says 4
    logits[2, [1, 9]] = 2.0  # tie across the first and the last block: argmax says 1
    for labels, expected in (([3, 4, 1], 3), ([8, 5, 9], 0), ([3, 5, 9], 1)):  # hits as argmax counts them
        labels = torch.tensor(labels)
        assert int((logits.argmax(-1) == labels).sum()) == expected
        _, hits = VocabCrossEntropy.apply(logits.t().contiguous().requires_grad_() * 1.0, labels)
        assert int(hits) == expected


def test_vocab_cross_entropy_consumes_its_input_once():
    weight, h, labels = _logits_and_reference(n=5, plant_hits=False)
    loss, _ = mlm_loss_sum((weight @ h.t()).t(), labels)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError):  # the logits now hold their gradient: a second backward must fail
        loss.backward()


def test_mlm_loss_refuses_logits_of_another_layout():
    with pytest.raises(ValueError, match="TransposedMLMHead"):
        mlm_loss_sum(torch.randn(4, VOCAB, requires_grad=True), torch.zeros(4, dtype=torch.long))


def test_install_keeps_parameters_ties_and_names_and_evaluation_outputs():
    torch.manual_seed(0)
    plain = BertForPreTraining(BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=2,
                                          intermediate_size=64)).eval()
    fast_model = fast.install(copy.deepcopy(plain))
    assert fast.installed(fast_model) and not fast.installed(plain)
    assert list(fast_model.state_dict()) == list(plain.state_dict())
    assert fast_model.mlm_head.decoder.weight is fast_model.bert.embeddings.tokens.weight  # still tied
    kinds = {type(m).__name__ for m in fast_model.modules()}
    assert {"PackedDropout", "OneDnnLinear", "FastSelfAttention", "TransposedMLMHead"} <= kinds
    assert not {"Dropout", "Linear"} & kinds
    ids, masked = torch.randint(5, VOCAB, (2, 9)), torch.tensor([1, 12])
    with torch.no_grad():  # without dropout and gradients every fast piece computes the plain math
        a, b = plain(ids, masked_positions=masked), fast_model(ids, masked_positions=masked)
    torch.testing.assert_close(a.mlm_logits, b.mlm_logits)
    torch.testing.assert_close(a.nsp_logits, b.nsp_logits)


@pytest.mark.skipif(not fast_linear.onednn_available(), reason="this torch has no oneDNN")
def test_for_inference_puts_only_the_linear_layers_on_onednn_on_cpu_and_keeps_no_graph(monkeypatch):
    torch.manual_seed(0)
    plain = BertForPreTraining(BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=2,
                                          intermediate_size=64)).eval()
    model = fast.for_inference(copy.deepcopy(plain), torch.device("cpu"), True)
    kinds = {type(m) for m in model.modules()}
    assert fast_linear.OneDnnLinear in kinds and not {torch.nn.Linear, *(f for _, f in fast.PIECES.values()
                                                                          if f is not fast_linear.OneDnnLinear)} & kinds
    assert list(model.state_dict()) == list(plain.state_dict())
    layers = sum(isinstance(m, fast_linear.OneDnnLinear) for m in model.modules())
    calls = _count_onednn_products(monkeypatch)
    ids, masked = torch.randint(5, VOCAB, (3, 11)), torch.tensor([1, 12, 30])
    # without grad the product is called directly: the autograd function, which keeps inputs for a backward, is not
    monkeypatch.setattr(fast_linear._OneDnnLinearFunction, "apply", lambda *args: pytest.fail("kept a graph"))
    with torch.no_grad():
        a, b = plain(ids, masked_positions=masked), model(ids, masked_positions=masked)
    assert len(calls) == layers and calls[0] == (33, 32)  # every Linear once, on the (tokens, hidden) rows
    torch.testing.assert_close(b.mlm_logits, a.mlm_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b.nsp_logits, a.nsp_logits, atol=1e-5, rtol=1e-5)
    elsewhere = fast.for_inference(copy.deepcopy(plain), torch.device("cuda"), True)  # only its type is read
    switched_off = fast.for_inference(copy.deepcopy(plain), torch.device("cpu"), False)  # cpu_fast_paths: false
    assert not {fast_linear.OneDnnLinear} & {type(m) for m in [*elsewhere.modules(), *switched_off.modules()]}


def test_choose_installs_on_cpu_when_asked_and_the_trainer_installs_nothing():
    def model() -> BertForPreTraining:
        return BertForPreTraining(BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=1, num_heads=2,
                                             intermediate_size=64))

    for device, enabled, expected in (("cpu", True, True), ("cpu", False, False), ("cuda", True, False)):
        built = model()
        assert fast.choose(built, torch.device(device), enabled) is expected
        assert fast.installed(built) is expected
    cfg = Config()
    cfg.pretrain.device = "cpu"
    plain = model()
    trainer = Trainer(cfg.pretrain, PretrainingObjective(), plain, Batches(stand_in_pairs(16), 4, seed=0))
    assert not fast.installed(plain) and not trainer.objective.fast  # the model's owner chooses, not the trainer


class _OneBatch:
    """Examples that always collate into the same micro-batch, to drive one trainer step."""

    def __init__(self, batch: PairBatch):
        self.batch, self.lengths = batch, torch.full((len(batch.nsp_labels),), batch.input_ids.size(1)).numpy()

    def micro_batches(self, rows, parts, seed, epoch, index, pad_multiple=1):  # noqa: ANN001
        return [self.batch]


def _fast_step(model, batch) -> torch.Tensor:
    """One step of the trainer with the fast pieces; returns its sums (MLM loss, NSP loss, MLM hits)."""
    cfg = Config()
    cfg.pretrain.batch_size, cfg.pretrain.lr, cfg.pretrain.warmup_steps = len(batch.nsp_labels), 1e-3, 0
    cfg.pretrain.device = "cpu"
    # as pre-training does
    objective = PretrainingObjective(fast=fast.choose(model, torch.device("cpu"), cfg.pretrain.cpu_fast_paths))
    trainer = Trainer(cfg.pretrain, objective, model, Batches(_OneBatch(batch), len(batch.nsp_labels), 0),
                      total_steps=10)
    assert fast.installed(model) and objective.fast
    torch.manual_seed(3)  # the same dropout draws on both sides (the trainer seeded its own)
    trainer.train_step(0)  # lr at step 0 of 10 without warm-up: 1e-3
    totals = trainer.window_totals()
    return torch.tensor([totals["mlm_loss_sum"], totals["nsp_loss_sum"], totals["mlm_correct"]], dtype=torch.float64)


def _plain_step(model, batch, monkeypatch) -> torch.Tensor:
    """The same step in plain PyTorch: plain attention, the plain loss (F.cross_entropy), per-tensor AdamW; dropout
    at the fast dropout's positions so that both sides drop the same elements."""
    # the fast dropout, and the unpadded encoder (its own test holds it to the plain one) so that dropout draws
    # over the same real tokens on both sides
    fast.install(model, pieces=("dropout", "unpad"))
    monkeypatch.setattr(type(model.bert.layers[0].attn), "attend",
                        lambda self, q, k, v, mask, p: _plain_attention(q, k, v, mask, p))
    decay = [t for t in model.parameters() if t.ndim >= 2]
    no_decay = [t for t in model.parameters() if t.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-3, betas=(0.9, 0.999), eps=1e-6, foreach=False)
    torch.manual_seed(3)
    out = model(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.masked_positions)
    mlm = losses.masked_lm(out.mlm_logits, batch.mlm_labels, fast=False)
    nsp = losses.next_sentence(out.nsp_logits, batch.nsp_labels)
    losses.pretraining(mlm, nsp, len(batch.mlm_labels), len(batch.nsp_labels)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return torch.tensor([mlm.loss.item(), nsp.loss.item(), float(mlm.correct)], dtype=torch.float64)


def test_training_step_matches_the_plain_pytorch_step(monkeypatch):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    fast_model = BertForPreTraining(config).train()
    plain_model = copy.deepcopy(fast_model)
    assert plain_model.mlm_head.decoder.weight is plain_model.bert.embeddings.tokens.weight  # still tied
    gen = torch.Generator().manual_seed(1)
    B, T = 4, 10
    input_ids = torch.randint(5, VOCAB, (B, T), generator=gen)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    attention_mask[1, 7:] = 0
    positions = torch.tensor([1, 3, 12, 15, 21, 24, 33, 38])
    batch = PairBatch(input_ids=input_ids, token_type_ids=torch.zeros(B, T, dtype=torch.long),
                      attention_mask=attention_mask, masked_positions=positions,
                      mlm_labels=torch.randint(5, VOCAB, (len(positions),), generator=gen),
                      nsp_labels=torch.tensor([0, 1, 1, 0]), n_tokens=int(attention_mask.sum()), n_padded=B * T)

    window = _fast_step(fast_model, batch)
    reference = _plain_step(plain_model, batch, monkeypatch)
    torch.testing.assert_close(window[:2], reference[:2], atol=1e-4, rtol=1e-5)  # losses, dropout included
    assert window[2] == reference[2]  # MLM hits
    for (name, ours), theirs in zip(fast_model.state_dict().items(), plain_model.state_dict().values(), strict=True):
        torch.testing.assert_close(ours, theirs, atol=2e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("packs", [True, False])
@pytest.mark.parametrize("kind", ["pretraining", "question_answering", "token_classification"])
def test_unpadded_encoder_gives_the_plain_encoder_s_outputs_and_gradients_on_real_tokens(kind, packs, monkeypatch):
    """`fast.unpad` runs the blocks on a padded batch's real tokens only (or, with little padding, on every
    position): every real position's output and every parameter's gradient is the plain model's (without dropout,
    whose draws follow the tensors' shapes); a batch without padding or without a mask gives the plain outputs."""
    from bertwb.fast import unpad
    from bertwb.model.heads import new_model

    monkeypatch.setattr(unpad, "PACK_ABOVE", 0.0 if packs else 1.0)

    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                        hidden_dropout=0.0, attention_dropout=0.0)
    plain = new_model(config, kind, ["O", "B-X", "I-X"] if kind == "token_classification" else None)
    unpadded = fast.install(copy.deepcopy(plain), pieces=("unpad",))
    assert type(unpadded.bert).__name__ == "UnpaddedBertModel"
    lengths = torch.tensor([12, 5, 9, 1 + 1])
    mask = (torch.arange(12)[None] < lengths[:, None]).long()  # (B, T): 1 = a real token
    ids, types = torch.randint(5, VOCAB, (4, 12)) * mask, (torch.arange(12)[None] >= 3).long() * mask
    outputs = []
    for model in (plain, unpadded):
        hidden, _ = model.bert(ids, types, mask)
        (hidden * mask[..., None] * torch.linspace(-1, 1, 32)).sum().backward()
        outputs.append(hidden * mask[..., None])
    torch.testing.assert_close(outputs[0], outputs[1], atol=1e-5, rtol=1e-5)
    for (name, a), b in zip(plain.named_parameters(), unpadded.parameters(), strict=True):
        if a.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4, msg=name)
    with torch.no_grad():  # no padding: the plain forward itself
        torch.testing.assert_close(plain.bert(ids[:1], types[:1])[0], unpadded.bert(ids[:1], types[:1])[0])
        torch.testing.assert_close(plain.bert(ids[:1], types[:1])[0], unpadded.bert(ids[:1], types[:1], mask[:1])[0])


def test_the_encoder_packs_a_batch_only_above_its_share_of_padding(monkeypatch):
    """Packing the real tokens costs gathers and scatters in every block; below `PACK_ABOVE` padding (on the QA
    sets, nearly every batch) the blocks run on every position, and attention gets no padding bias at all when
    nothing is padded; a batch without a mask takes the same blocks, whose residual sums take dropout in one pass."""
    from bertwb.fast import unpad
    from bertwb.model.heads import new_model

    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=1, num_heads=4, intermediate_size=64)
    model = fast.install(new_model(config, "question_answering"))
    seen = []
    monkeypatch.setattr(unpad, "packed_block", lambda block, x, positions, B, T, mask: seen.append(
        (positions is not None, mask is not None, x.size(0))) or x)
    ids = torch.randint(5, VOCAB, (4, 25))
    for padded in (0, 4, 5):  # of 100 positions; PACK_ABOVE is 0.04
        mask = torch.ones(4, 25, dtype=torch.long)
        mask[0, 25 - padded:] = 0
        model.bert(ids, None, mask)
    model.bert(ids, None, None)  # no mask at all (a QA batch of full windows): the same blocks, no bias
    assert seen == [(False, False, 100), (False, True, 100), (True, True, 95), (False, False, 100)]
