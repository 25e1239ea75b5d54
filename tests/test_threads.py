"""torch runs as many CPU threads as the cores cheems may use (OMP_NUM_THREADS wins), set where
models are loaded for scoring and training; the trainer says once when a step is far slower
than the first ones (a busy machine). Step times are injected, never measured."""

from __future__ import annotations

import os

import pytest

from cheems.models.threads import available_cores, use_available_cores
from cheems.training.trainer import SlowStepWatch

torch = pytest.importorskip("torch")


def affinity() -> int:
    return len(os.sched_getaffinity(0))


@pytest.mark.parametrize("environ, expected", [
    ({}, None),
    ({"OMP_NUM_THREADS": "3"}, 3),
    ({"OMP_NUM_THREADS": "4,2"}, 4),
    ({"OMP_NUM_THREADS": ""}, None),
    ({"OMP_NUM_THREADS": "0"}, None),
    ({"OMP_NUM_THREADS": "many"}, None),
    ({"OMP_NUM_THREADS": "5", "LOCAL_WORLD_SIZE": "2"}, 5),
])
def test_available_cores(environ, expected):
    assert available_cores(environ) == (affinity() if expected is None else expected)


def test_available_cores_are_shared_by_the_processes_of_one_machine(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert available_cores({}) == 8
    assert available_cores({"LOCAL_WORLD_SIZE": "2"}) == 4
    assert available_cores({"LOCAL_WORLD_SIZE": "16"}) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 5})  # a taskset, a container's CPU set
    assert available_cores({}) == 2


@pytest.fixture
def torch_threads_kept():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_use_available_cores_sets_torch(monkeypatch, torch_threads_kept):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(2)
    assert use_available_cores() == 1 and torch.get_num_threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert use_available_cores() == affinity() == torch.get_num_threads()


def test_loading_a_reward_model_on_cpu_sets_the_threads(seq_cls_model, monkeypatch, torch_threads_kept):
    from cheems.scoring.transformers_rm import load_reward_model

    torch.set_num_threads(2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    load_reward_model(seq_cls_model)
    assert torch.get_num_threads() == 1


# ----------------------------------------------------------------------------- a slow step

class FakeClock:
    """Each step's duration comes from ``durations``; the clock moves only inside a step."""

    def __init__(self, durations):
        self.durations, self.now, self.running = list(durations), 0.0, False

    def __call__(self) -> float:
        if self.running:
            self.now += self.durations.pop(0)
        self.running = not self.running
        return self.now


def run_steps(durations, **kw) -> list[str]:
    said: list[str] = []
    watch = SlowStepWatch(said.append, clock=FakeClock(durations), **kw)
    for step in range(1, len(durations) + 1):
        assert watch.time(step, lambda: step * 10) == step * 10
    return said


def test_a_step_far_slower_than_the_first_ones_is_said_once():
    said = run_steps([30.0, 1.0, 1.2, 0.9, 1.1, 1.0, 1.0, 9.0, 1.0, 20.0])
    assert len(said) == 1
    assert said[0].startswith("note: step 8 took 9.0 s, over 4x the usual 1.00 s: the machine looks busy")
    assert f"torch runs {torch.get_num_threads()} CPU thread(s)" in said[0]


@pytest.mark.parametrize("durations", [
    [30.0, 1.0, 1.0, 1.0, 1.0, 1.0, 3.9, 4.0, 2.0],  # at most 4x: nothing to say
    [30.0] + [1.0] * 5,  # a slow first step is warm-up
    [1.0, 1.0, 1.0, 20.0, 1.0, 1.0],  # slow among the first steps: part of the usual
])
def test_steps_as_slow_as_the_usual_say_nothing(durations):
    assert run_steps(durations) == []


def test_the_usual_step_is_the_median_of_the_first_steps_after_warm_up():
    # one slow step among the first five does not raise the usual step (a mean would be 20.8 s)
    assert "the usual 1.00 s" in run_steps([5.0, 1.0, 1.0, 100.0, 1.0, 1.0, 4.5])[0]
    assert run_steps([5.0, 2.0, 2.0, 2.0, 8.0], baseline=3) == []
    assert len(run_steps([5.0, 2.0, 2.0, 2.0, 8.1], baseline=3)) == 1
    assert len(run_steps([2.0, 2.0, 2.0, 2.0, 6.1], baseline=3, warmup=0, factor=3.0)) == 1


def test_no_notify_no_note():
    watch = SlowStepWatch(None, clock=FakeClock([1.0] * 6 + [50.0]))
    for step in range(1, 8):
        watch.time(step, lambda: None)
    assert not watch.said
