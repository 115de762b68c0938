import pytest
import torch

from asyncrl.models import ActorCritic, ModelSpec, QNetwork, build_model, flatten_parameters


def test_flat_parameters_are_views():
    model = ActorCritic(ModelSpec("actor-critic", 4, 2))
    flat = flatten_parameters(model)
    flat.zero_()
    assert all(float(p.detach().abs().sum()) == 0.0 for p in model.parameters())
    flat.add_(1.0)
    logits, v = model(torch.zeros(1, 4))
    assert torch.all(logits == logits[0, 0]) and v.shape == (1,)


def test_flatten_into_a_given_vector_checks_the_size():
    model = ActorCritic(ModelSpec("actor-critic", 4, 2))
    n = sum(p.numel() for p in model.parameters())
    with pytest.raises(ValueError, match="elements"):
        flatten_parameters(model, torch.zeros(n + 1))


@pytest.mark.parametrize("shared", [True, False])
def test_shared_or_separate_trunk(shared):
    model = ActorCritic(ModelSpec("actor-critic", 4, 3, hidden=(16, 16), shared_trunk=shared))
    logits, v = model(torch.randn(5, 4))
    assert logits.shape == (5, 3) and v.shape == (5,)
    v.sum().backward()
    policy_trunk_grad = model.pi_body[0].weight.grad
    # with a shared trunk the value loss trains the policy's hidden layers; separate: it cannot
    assert (policy_trunk_grad is not None) == shared


def test_q_network_and_build():
    spec = ModelSpec("q", 4, 2)
    assert isinstance(build_model(spec), QNetwork)
    assert build_model(spec)(torch.zeros(3, 4)).shape == (3, 2)
    assert ModelSpec.from_dict(spec.to_dict()) == spec
