"""Train the mountain-car evaluation policy by Q-learning and store it as a JSON artifact.

Run::

    python -m gpope.core.envs.train_mountaincar --out gpope/core/envs/artifacts/mountaincar_q_v1.json --seed 0

Method (the paper's: Q-learning with the 5th-order Fourier basis, one weight vector per action):

- ``Q(s, a) = W[a] . phi(s)``, ``phi`` the full order-5 Fourier basis over the public bounds (36
  features), ``W`` (3, 36) initialised to 0 (optimistic: every return is negative).
- One-step Q-learning, ``delta = r + gamma max_a' Q(s', a') - Q(s, a)`` (``max`` term dropped on
  termination, kept on truncation), per-feature step sizes ``alpha / ||c||_2`` (``alpha`` for
  ``c = 0``), epsilon-greedy exploration with random tie breaking, ``gamma = 1`` (undiscounted, as
  in Sutton and Barto's mountain car).
- Training episodes use the vectorised dynamics of :mod:`gpope.core.envs.mountaincar` (tested to
  equal gymnasium's) with a longer time limit than evaluation so early episodes reach the goal.
- Afterwards the greedy policy is evaluated on independent start states with the 200-step limit;
  its success rate is stored with the weights, the feature spec, the training parameters, the seed
  and the command.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from gpope.core.envs import mountaincar as mc
from gpope.core.envs.trainer_cli import command_line, trainer_parser, write_artifact
from gpope.core.policies import EpsilonGreedyPolicy, LinearQ
from gpope.core.validation import check_int, check_number

__all__ = ["evaluate_greedy", "main", "train"]

ARTIFACT_NAME = "mountaincar_q_v1"


def train(*, seed: int = 0, episodes: int = 1000, alpha: float = 0.01, epsilon: float = 0.05,
          gamma: float = 1.0, order: int = 5, max_episode_steps: int = 1000) -> LinearQ:
    """Q-learning (module docstring); the learned :class:`LinearQ`, weights (3, (order + 1)^2).
    ``seed`` seeds the one generator of start states and exploration; ``alpha`` is the base step
    size (divided by ``||c||`` per feature); ``max_episode_steps`` the training time limit."""
    episodes = check_int("train", "episodes", episodes, ge=1)
    alpha = check_number("train", "alpha", alpha, gt=0.0)
    epsilon = check_number("train", "epsilon", epsilon, ge=0.0, le=1.0)
    gamma = check_number("train", "gamma", gamma, ge=0.0, le=1.0)
    max_episode_steps = check_int("train", "max_episode_steps", max_episode_steps, ge=1)
    rng = np.random.default_rng(seed)
    fmap = mc.feature_map(order)
    coeffs = np.asarray(fmap.coefficients)
    norms = np.linalg.norm(coeffs, axis=1)
    rates = alpha / np.where(norms > 0, norms, 1.0)
    # Direct feature computation for single states (same formula as FourierFeatures).
    low, high = np.asarray(mc.LOW), np.asarray(mc.HIGH)
    pic = np.pi * coeffs.T

    def phi(s: np.ndarray) -> np.ndarray:
        return np.cos(np.clip((s - low) / (high - low), 0.0, 1.0) @ pic)

    W = np.zeros((mc.N_ACTIONS, fmap.n_features))
    for _ in range(episodes):
        s = mc.initial(rng, 1)
        f = phi(s[0])
        for _t in range(max_episode_steps):
            q = W @ f
            if rng.random() < epsilon:
                a = int(rng.integers(mc.N_ACTIONS))
            else:
                best = np.flatnonzero(q == q.max())
                a = int(best[rng.integers(len(best))])
            s, r, term = mc.step(s, np.array([a]))
            if term[0]:
                W[a] += rates * (r[0] - q[a]) * f
                break
            f2 = phi(s[0])
            W[a] += rates * (r[0] + gamma * np.max(W @ f2) - q[a]) * f
            f = f2
    return LinearQ(W, fmap)


def evaluate_greedy(q: LinearQ, n_episodes: int, seed: int, max_steps: int = mc.MAX_STEPS) -> dict[str, float]:
    """Success rate and mean length of the greedy policy over independent episodes."""
    data = mc.generate(n_episodes, np.random.default_rng(seed), EpsilonGreedyPolicy(q, 0.0), max_steps)
    success = np.zeros(n_episodes, dtype=bool)
    success[data.traj_index[data.terminal]] = True
    return {"success_rate": float(success.mean()), "mean_length": float(data.lengths.mean())}


def main(argv: list[str] | None = None) -> int:
    """Command line: train, evaluate, write the artifact."""
    parser = trainer_parser(__doc__, train, ("seed", "episodes", "alpha", "epsilon", "gamma"),
                            eval_episodes=1000)
    args = parser.parse_args(argv)
    # what train() runs with is what the artifact records
    settings: dict[str, Any] = {"episodes": args.episodes, "alpha": args.alpha,
                                "epsilon": args.epsilon, "gamma": args.gamma, "order": 5,
                                "max_episode_steps": 1000}
    params = {"algorithm": "q_learning", **settings,
              "step_sizes": "alpha / ||c||_2 per feature (alpha for c = 0)", "initial_weights": 0.0}
    start = time.perf_counter()
    q = train(seed=args.seed, **settings)
    seconds = time.perf_counter() - start
    evaluation = evaluate_greedy(q, args.eval_episodes, seed=args.seed + 1)
    policy = EpsilonGreedyPolicy(q, 0.0)
    artifact = {
        "name": args.out.stem,
        "domain": mc.VERSION,
        "description": "Q-learned linear action values for MountainCar-v0 (order-5 Fourier); "
        "the stored policy is greedy in them.",
        "policy": policy.to_dict(),
        "feature_map": q.feature_map.to_dict(),
        "training": params,
        "seed": args.seed,
        "command": command_line("gpope.core.envs.train_mountaincar", argv),
        "training_seconds": round(seconds, 1),
        "greedy_evaluation": {"episodes": args.eval_episodes, "max_steps": mc.MAX_STEPS,
                              "eval_seed": args.seed + 1, **evaluation},
    }
    write_artifact(args.out, artifact)
    print(f"wrote {args.out}: greedy success {evaluation['success_rate']:.3f}, "
          f"mean length {evaluation['mean_length']:.1f}, trained in {seconds:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
