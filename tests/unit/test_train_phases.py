"""Ray Train's phases in the timeline (the start-up issue, part 1): the import check that decides whether the
companion names rtjob's Train callback, the variable it composes with the user's, and the event lines it reads back
(with the time they carry, wherever Ray's prefix puts them). The e2e half: tests/e2e/test_plain_raytrain.py."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from rtjob.runside import train_phases

import rtjob_contract as contract

RAY_DIR = Path(next(iter(importlib.util.find_spec("ray").submodule_search_locations or [])))


def test_the_installed_ray_has_the_interface_and_the_callback_is_appended_to_the_users() -> None:
    assert train_phases.ray_has_the_interface()
    assert train_phases.callbacks_env({}) == {contract.ENV_TRAIN_CALLBACKS: contract.TRAIN_CALLBACK}
    own = {contract.ENV_TRAIN_CALLBACKS: "team.callbacks.Timer, "}
    assert train_phases.callbacks_env(own) == {
        contract.ENV_TRAIN_CALLBACKS: f"team.callbacks.Timer,{contract.TRAIN_CALLBACK}"}
    twice = {contract.ENV_TRAIN_CALLBACKS: contract.TRAIN_CALLBACK}
    assert train_phases.callbacks_env(twice) == twice


def test_a_ray_without_the_interface_gets_nothing_set(tmp_path: Path) -> None:
    """A Ray whose Train lacks the env callbacks, or one hook the callback uses: the entrypoint's environment is
    left as it was (a callback Ray cannot import would fail the user's training)."""
    fake = tmp_path / "ray"
    for rel in train_phases._NEEDS:
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(RAY_DIR / rel, fake / rel)
    assert train_phases.ray_has_the_interface(fake)
    (fake / "train/v2/_internal/callbacks/env_callback.py").unlink()
    assert train_phases.callbacks_env({}, fake) == {}
    shutil.copy(RAY_DIR / "train/v2/_internal/callbacks/env_callback.py",
                fake / "train/v2/_internal/callbacks/env_callback.py")
    hooks = fake / "train/v2/_internal/execution/callback.py"
    hooks.write_text(hooks.read_text().replace("def after_report(", "def after_reporting("))
    assert train_phases.callbacks_env({contract.ENV_TRAIN_CALLBACKS: "mine.Cb"}, fake) == {}


def test_event_lines_carry_their_own_time_through_rays_prefix() -> None:
    chunk = (b"epoch 1\n"
             b'(TrainController pid=41) rtjob-event: train_controller_started {"at": "2026-12-02T08:00:01.250+00:00"}\n'
             b"(RayTrainWorker pid=52) rtjob-event: process_group_ready {\"at\": \"not a time\"}\n"
             b"rtjob-event: first_step\n"
             b"rtjob-event: step_row {\"step\": 1}\n"
             b"rtjob-event: first_steps\n")
    assert train_phases.event_times(chunk) == [
        (contract.EVENT_TRAIN_CONTROLLER_STARTED, "2026-12-02T08:00:01.250+00:00"),
        (contract.EVENT_PROCESS_GROUP_READY, None), (contract.EVENT_FIRST_STEP, None)]
