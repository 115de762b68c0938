"""Networks as encoder -> core -> heads (Sample Factory's split, which keeps each part small).

* encoder, from the observation space: an MLP for vectors; conv nets for images -- the A3C
  paper's (conv 16 8x8/4, conv 32 4x4/2, fc 256), the Nature DQN net (conv 32 8x8/4, 64 4x4/2,
  64 3x3/1, fc 512) and MinAtar's (conv 16 3x3/1, fc 128; Young & Tian, 2019). Observations
  arrive in the env's dtype; uint8 images are divided by 255 here, inside the network, so the
  rollout buffer stays uint8. Observation normalisation (``--normalize-obs``) is the MLP
  encoder's first piece. A structured (Dict, Tuple) observation arrives packed into one row
  (:mod:`asyncrl.spaces`) and :class:`MultiInputEncoder` encodes each leaf by its kind. Or the
  user's own (``--encoder package.module:Class``, :mod:`~asyncrl.models.user`), given the
  observations in their space's structure, located by its import path in every process.
* core: always there, one signature ``core.step(x, state, first) -> (h, state)`` whatever it is
  (:data:`CORES`): the identity, which carries an empty state (Sample Factory's
  ``ModelCoreIdentity``), or a recurrent cell (the paper's LSTM; a GRU).
* heads: the parameters of the action distribution (:mod:`asyncrl.distributions`, chosen from
  the action space) and a value; or Q values.

Both networks expose the same two calls: :meth:`act` for one step of a batch of envs, and
:meth:`unroll` for a rollout recomputed from the core's state at its start (the actor-critic
adds :meth:`ActorCritic.act_value`, ``act`` with the critic run too). Nothing outside this package
knows whether the core is recurrent. Each call takes an optional ``context``: the previous
action and reward (``--prev-action-reward``, :func:`write_context`), which the core takes
beside the encoder's features.

Every model is rebuilt from a plain :class:`ModelSpec` (a dict on disk), so a worker process, a
checkpoint and ``asyncrl.load`` all construct the same architecture without pickling modules.

The package's files: :mod:`~asyncrl.models.spec` (the spec and the core's context),
:mod:`~asyncrl.models.encoders`, :mod:`~asyncrl.models.user` (an encoder of the user's own),
:mod:`~asyncrl.models.normalizer`, :mod:`~asyncrl.models.cores`,
:mod:`~asyncrl.models.networks` (the heads, and :func:`build_model`) and
:mod:`~asyncrl.models.params` (the flat parameter vector). Import from ``asyncrl.models``: this
file names every public one.
"""

from asyncrl.models.cores import (
    CORES,
    Core,
    GRUCore,
    IdentityCore,
    LSTMCore,
    RecurrentCore,
    build_core,
)
from asyncrl.models.encoders import (
    ConvEncoder,
    MLPEncoder,
    MultiInputEncoder,
    as_float,
    build_encoder,
    cpu_bfloat16_units,
    cpu_has_bfloat16_units,
    encode_rollout,
    space_to_depth,
    space_to_depth_weight,
)
from asyncrl.models.networks import ActorCritic, Network, QNetwork, build_model
from asyncrl.models.normalizer import (
    ObsNormalizer,
    bind_obs_stats,
    build_normalizer,
    combine_obs_stats,
    merge_obs_stats,
    obs_stats_of,
    update_obs_stats,
)
from asyncrl.models.params import flat_grad, flatten_parameters
from asyncrl.models.spec import Encoder, ModelSpec, write_context
from asyncrl.models.user import UserEncoder, check_encoder, encoder_path, import_encoder
from asyncrl.spaces import conv_net_problem

__all__ = [
    "CORES",
    "ActorCritic",
    "ConvEncoder",
    "Core",
    "Encoder",
    "GRUCore",
    "IdentityCore",
    "LSTMCore",
    "MLPEncoder",
    "ModelSpec",
    "MultiInputEncoder",
    "Network",
    "ObsNormalizer",
    "QNetwork",
    "RecurrentCore",
    "UserEncoder",
    "as_float",
    "bind_obs_stats",
    "build_core",
    "build_encoder",
    "build_model",
    "build_normalizer",
    "check_encoder",
    "combine_obs_stats",
    "conv_net_problem",
    "cpu_bfloat16_units",
    "cpu_has_bfloat16_units",
    "encode_rollout",
    "encoder_path",
    "flat_grad",
    "flatten_parameters",
    "import_encoder",
    "merge_obs_stats",
    "obs_stats_of",
    "space_to_depth",
    "space_to_depth_weight",
    "update_obs_stats",
    "write_context",
]
