"""Train the HIV evaluation policy by fitted Q iteration and store it as a JSON artifact.

Run::

    python -m gpope.core.envs.train_hiv --out gpope/core/envs/artifacts/hiv_q_v1.json --seed 0

Method (linear fitted Q iteration, Ernst et al. 2006 style but with least squares instead of
extra trees):

- ``Q(s, a) = W[a] . phi(s)``, ``phi`` = :func:`gpope.core.envs.hiv.hiv_feature_map` (73 Fourier
  features of the log10 observations), ``W`` (4, 73).
- Data: ``rounds`` (3) rounds of ``patients`` (100) simulated patients x 200 decisions (published
  parameters plus the public patient variation ``param_variation``); round 1 acts uniformly at
  random, later rounds epsilon-greedily in the current Q (epsilon 0.3). All rounds are pooled.
- Each FQI iteration regresses ``r / reward_scale + gamma max_a' Q(s', a')`` on ``phi(s)`` per
  action by ridge least squares (``ridge``); truncated last steps bootstrap too (no terminal
  state). Rewards are divided by ``reward_scale`` (1e5) while fitting and the weights multiplied
  back, so the stored Q is in reward units.
- Model selection on the simulator: every 10 FQI iterations the weights are a candidate; the one
  whose greedy policy earns the highest discounted return from the start state is kept (and
  explored around in the next round). Linear FQI is not guaranteed to converge, so this guards
  against a bad final iterate.
- The target policy is greedy in Q; the behaviour policy is a softmax over Q with the stored
  ``behavior_temperature``: chosen on the (simulated, public) training states so that the greedy
  action's mean probability is about 0.6 (every action keeps positive probability).
- Evaluation stored with the artifact: discounted (gamma 0.98) and undiscounted returns over 200
  decisions from the start state of the greedy policy vs no treatment vs always both drugs (the
  simulator is deterministic, so one episode each is exact).

Ground-truth helpers for the experiments: :func:`monte_carlo_values` and
:func:`large_sample_statistics` (or :func:`sample_statistics` of a sample simulated elsewhere);
policies: :func:`target_policy`, :func:`behavior_policy`.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from gpope.core.envs import hiv
from gpope.core.envs.trainer_cli import command_line, trainer_parser, write_artifact
from gpope.core.statistics import population_scale, population_statistics, population_sums
from gpope.core.validation import check_int, check_number
from gpope.errors import SchemaError

if TYPE_CHECKING:
    from gpope.core.features import FeatureMap
    from gpope.core.policies import LinearQ, Policy
    from gpope.core.trajectories.transitions import Transitions

__all__ = ["ARTIFACT_NAME", "behavior_policy", "evaluate_policies", "greedy_start_returns",
           "large_sample_statistics", "main", "monte_carlo_values", "sample_statistics",
           "target_policy", "train"]

ARTIFACT_NAME = "hiv_q_v1"
REWARD_SCALE = 1e5


def train(*, seed: int = 0, patients: int = 100, rounds: int = 3, iterations: int = 150,
          ridge: float = 1e-3, epsilon: float = 0.3, param_variation: float = 0.05,
          n_steps: int = hiv.MAX_STEPS, gamma: float = hiv.GAMMA,
          checkpoint_every: int = 10) -> tuple[LinearQ, np.ndarray]:
    """Fitted Q iteration; returns the action values and the pooled training states (T, 6).

    Every ``checkpoint_every`` iterations the weights are a candidate; the candidate whose greedy
    policy has the highest discounted return from the start state (simulator, published
    parameters) is kept, and later rounds explore around it.
    """
    from gpope.core.policies import EpsilonGreedyPolicy, LinearQ, UniformPolicy

    patients = check_int("train", "patients", patients, ge=1)
    rounds = check_int("train", "rounds", rounds, ge=1)
    iterations = check_int("train", "iterations", iterations, ge=1)
    ridge = check_number("train", "ridge", ridge, ge=0.0)
    rng = np.random.default_rng(seed)
    fmap = hiv.hiv_feature_map()
    n = fmap.n_features
    W = np.zeros((hiv.N_ACTIONS, n))
    best_W, best_return = W, -np.inf
    phis, nphis, acts, rews, states = [], [], [], [], []
    for r in range(rounds):
        q = LinearQ(best_W * REWARD_SCALE, fmap)
        policy = UniformPolicy(hiv.N_ACTIONS) if r == 0 else EpsilonGreedyPolicy(q, epsilon)
        data = hiv.generate(patients, rng, policy, n_steps=n_steps, param_variation=param_variation)
        phis.append(fmap(data.state))
        nphis.append(fmap(data.next_state))
        acts.append(data.action)
        rews.append(data.reward / REWARD_SCALE)
        states.append(data.state)
        phi, nphi = np.concatenate(phis), np.concatenate(nphis)
        act, rew = np.concatenate(acts), np.concatenate(rews)
        solvers = []
        for a in range(hiv.N_ACTIONS):
            rows = act == a
            gram = phi[rows].T @ phi[rows] + ridge * rows.sum() * np.eye(n)
            solvers.append((rows, np.linalg.inv(gram) @ phi[rows].T))
        checkpoints = []
        for i in range(iterations):
            target = rew + gamma * np.max(nphi @ W.T, axis=1)
            W = np.stack([proj @ target[rows] for rows, proj in solvers])
            if (i + 1) % checkpoint_every == 0 or i + 1 == iterations:
                checkpoints.append(W)
        returns = greedy_start_returns(checkpoints, fmap, gamma, n_steps)
        j = int(np.argmax(returns))
        if returns[j] > best_return:
            best_W, best_return = checkpoints[j], float(returns[j])
    return LinearQ(best_W * REWARD_SCALE, fmap), np.concatenate(states)


def greedy_start_returns(weights: list[np.ndarray], fmap: FeatureMap, gamma: float = hiv.GAMMA,
                         n_steps: int = hiv.MAX_STEPS) -> np.ndarray:
    """Discounted return from :data:`hiv.START` (published parameters) of the greedy policy of each
    weight matrix (A, n), all simulated as one cohort; ties go to the lowest action index."""
    c = len(weights)
    W = np.stack(weights)
    raw = np.tile(hiv.START, (c, 1))
    total = np.zeros(c)
    for t in range(n_steps):
        phi = fmap(hiv.to_observation(raw))
        actions = np.argmax(np.einsum("cn,can->ca", phi, W), axis=1)
        raw, rewards = hiv.step(raw, actions)
        total += gamma**t * rewards
    return total


def _returns(policy: Policy, gamma: float, n_steps: int) -> dict[str, float]:
    data = hiv.generate(1, np.random.default_rng(0), policy, n_steps=n_steps)
    disc = gamma ** np.arange(n_steps)
    final = 10.0 ** data.next_state[-1]
    return {
        "discounted_return": float(disc @ data.reward),
        "undiscounted_return": float(data.reward.sum()),
        "final_log10_viral_load": float(np.log10(final[4])),
        "final_log10_immune_effectors": float(np.log10(final[5])),
        "action_counts": np.bincount(data.action, minlength=hiv.N_ACTIONS).tolist(),
    }


def evaluate_policies(q: LinearQ, gamma: float = hiv.GAMMA, n_steps: int = hiv.MAX_STEPS) -> dict[str, Any]:
    """Returns from the start state (published parameters) of greedy-in-q, no drug and both drugs."""
    from gpope.core.policies import EpsilonGreedyPolicy, FixedActionPolicy

    return {
        "greedy": _returns(EpsilonGreedyPolicy(q, 0.0), gamma, n_steps),
        "no_treatment": _returns(FixedActionPolicy(0, hiv.N_ACTIONS), gamma, n_steps),
        "always_both": _returns(FixedActionPolicy(3, hiv.N_ACTIONS), gamma, n_steps),
    }


def _temperature_for(q: LinearQ, states: np.ndarray, greedy_mass: float = 0.6) -> float:
    """Softmax temperature whose mean greedy-action probability on ``states`` is ``greedy_mass``."""
    values = q.values(states)

    def mass(temp: float) -> float:
        z = (values - values.max(axis=1, keepdims=True)) / temp
        p = np.exp(z)
        return float(np.mean(p.max(axis=1) / p.sum(axis=1)))

    lo, hi = 1e-3, 1e12  # mass decreases in the temperature: bisection on a log scale
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if mass(mid) > greedy_mass else (lo, mid)
    return float(f"{math.sqrt(lo * hi):.3g}")


def target_policy(name: str = ARTIFACT_NAME) -> Policy:
    """The paper's target: greedy in the learned Q of artifact ``name``."""
    from gpope.core.policies import load_policy

    return load_policy(name)


def behavior_policy(temperature: float | None = None, name: str = ARTIFACT_NAME) -> Policy:
    """Softmax over the learned Q; ``temperature`` None uses the artifact's ``behavior_temperature``."""
    from gpope.core.policies import SoftmaxPolicy, load_artifact, load_policy

    stored = load_policy(name)
    if temperature is None:
        temperature = float(load_artifact(name)["behavior_temperature"])
    return SoftmaxPolicy(stored.q, temperature)  # type: ignore[attr-defined]


def monte_carlo_values(policy: Policy, states: np.ndarray, rng: np.random.Generator,
                       n_rollouts: int = 20, gamma: float = hiv.GAMMA, n_steps: int = hiv.MAX_STEPS,
                       *, param_variation: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo ``(values (k,), standard errors (k,))`` of
    ``E[sum_{t < n_steps} gamma^t R_t | S_0 = s]`` from (k, 6) log10 states.

    All ``k * n_rollouts`` rollouts run as one vectorised cohort; with a deterministic policy and
    no parameter variation one rollout per state is exact (standard errors 0 for one rollout).
    """
    states = np.asarray(states, dtype=np.float64)
    if states.ndim != 2 or states.shape[1] != 6:
        raise SchemaError(f"states must have shape (k, 6); got {states.shape}.")
    n_rollouts = check_int("monte_carlo_values", "n_rollouts", n_rollouts, ge=1)
    gamma = check_number("monte_carlo_values", "gamma", gamma, ge=0.0, le=1.0)
    k = len(states)
    start = 10.0 ** np.repeat(states, n_rollouts, axis=0)
    data = hiv.generate(k * n_rollouts, rng, policy, n_steps=n_steps,
                        param_variation=param_variation, start=start)
    returns = (data.reward * gamma ** data.t.astype(np.float64)).reshape(k * n_rollouts, n_steps).sum(axis=1)
    per_state = returns.reshape(k, n_rollouts)
    se = per_state.std(axis=1, ddof=1) / math.sqrt(n_rollouts) if n_rollouts > 1 else np.zeros(k)
    return per_state.mean(axis=1), se


def large_sample_statistics(behavior: Policy, target: Policy, rng: np.random.Generator, *,
                            gamma: float = hiv.GAMMA,
                            normalization: Literal["transition", "trajectory_mean"] = "transition",
                            length_scale: float | None = float(hiv.MAX_STEPS),
                            n_trajectories: int = 1000, n_steps: int = hiv.MAX_STEPS,
                            features: FeatureMap | None = None, param_variation: float = 0.0,
                            obs_noise: float = 0.0,
                            chunk: int = 1000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Population ``A, b, C`` (mean over trajectories) from a large independent behaviour sample.

    Same definitions as :func:`gpope.core.envs.mountaincar.large_sample_statistics`: per trajectory
    weight ``w_i = 1/L`` (``"transition"``) or ``1/tau_i``; ``A_i = w_i sum rho phi (phi -
    gamma phi')^T``, ``b_i = w_i sum rho R phi``, ``C_i = w_i sum phi phi^T`` (no terminal steps
    in this domain); ``(A (n, n), b (n,), C (n, n))`` for ``features`` (default
    :func:`hiv.hiv_feature_map`).
    """
    return population_statistics(
        lambda size: hiv.generate(size, rng, behavior, n_steps=n_steps,
                                  param_variation=param_variation, obs_noise=obs_noise),
        target, features if features is not None else hiv.hiv_feature_map(), gamma=gamma,
        normalization=normalization, length_scale=length_scale, n_trajectories=n_trajectories,
        chunk=chunk,
    )


def sample_statistics(
    sample: Transitions,
    target: Policy,
    *,
    gamma: float = hiv.GAMMA,
    normalization: Literal["transition", "trajectory_mean"] = "transition",
    length_scale: float | None = float(hiv.MAX_STEPS),
    features: FeatureMap | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The :func:`large_sample_statistics` of an already simulated behaviour ``sample``.

    ``sample_statistics(hiv.generate(m, rng, behavior), target, ...)`` equals
    ``large_sample_statistics(behavior, target, rng, n_trajectories=m, ...)`` exactly when
    ``m <= chunk`` (one chunk); it lets a caller simulate the sample together with other cohorts
    (:func:`gpope.core.envs.hiv.generate_many`).
    """
    gamma, scale = population_scale("sample_statistics", normalization, gamma, length_scale)
    phi_map = features if features is not None else hiv.hiv_feature_map()
    A, b, C = population_sums(sample, target, phi_map, gamma=gamma, length_scale=scale)
    m = sample.n_trajectories
    return A / m, b / m, C / m


def main(argv: list[str] | None = None) -> int:
    """Command line: train, evaluate, write the artifact."""
    from gpope.core.policies import EpsilonGreedyPolicy

    parser = trainer_parser(__doc__, train, ("seed", "patients", "rounds", "iterations", "ridge"))
    args = parser.parse_args(argv)
    params: dict[str, Any] = {
        "algorithm": "fitted_q_iteration_linear_ridge", "patients_per_round": args.patients,
        "rounds": args.rounds, "first_round_policy": "uniform",
        "later_round_policy": "epsilon_greedy(0.3) in the current Q",
        "iterations_per_round": args.iterations,
        "selection": "best discounted start-state return of the greedy policy over checkpoints "
        "every 10 iterations",
        "ridge": args.ridge, "ridge_scaling": "ridge * rows_of_action * I",
        "reward_scale": REWARD_SCALE, "param_variation": 0.05, "n_steps": hiv.MAX_STEPS,
        "gamma": hiv.GAMMA,
    }
    start = time.perf_counter()
    q, states = train(seed=args.seed, patients=args.patients, rounds=args.rounds,
                      iterations=args.iterations, ridge=args.ridge)
    seconds = time.perf_counter() - start
    temperature = _temperature_for(q, states)
    evaluation = evaluate_policies(q)
    artifact = {
        "name": args.out.stem,
        "domain": hiv.VERSION,
        "description": "Linear fitted-Q action values for the HIV model (73 Fourier features of the "
        "log10 states); the stored policy is greedy in them (the evaluation target). Behaviour: "
        "softmax over the same Q with behavior_temperature.",
        "policy": EpsilonGreedyPolicy(q, 0.0).to_dict(),
        "feature_map": q.feature_map.to_dict(),
        "behavior_temperature": temperature,
        "behavior_temperature_rule": "mean greedy-action probability 0.6 on the training states",
        "training": params,
        "seed": args.seed,
        "command": command_line("gpope.core.envs.train_hiv", argv),
        "training_seconds": round(seconds, 1),
        "evaluation": {"start": "hiv.START", "n_steps": hiv.MAX_STEPS, "gamma": hiv.GAMMA, **evaluation},
    }
    write_artifact(args.out, artifact)
    summary = ", ".join(f"{k} {v['discounted_return']:.4g}" for k, v in evaluation.items())
    print(f"wrote {args.out} in {seconds:.1f}s; discounted returns: {summary}; temperature {temperature:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
