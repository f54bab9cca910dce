"""run_many in local mode, through the real microvm engine: the CLI's fleet
code, not a Python loop."""
import unittest

from microvms import FleetResult, InvalidArgError, run_many

from .engine_env import require_engine


class FleetTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()

    def test_three_microvms_each_a_result(self) -> None:
        # Catches: a fleet whose non-zero exits raise instead of reporting
        # (the engine's envelope is ERR_EXEC_FAILED, the worst run's exit),
        # runs that share one MicroVM, and a fleet without its one cost.
        # launch_env reaches every MicroVM (create's launch options): the
        # wrong edit is a run_many op that launches with none.
        fleet = run_many('hostname; echo "out $WHO"; exit 3', count=3, parallel=2, local=True, launch_env={"WHO": "fleet"})
        self.assertIsInstance(fleet, FleetResult)
        self.assertEqual(len(fleet.runs), 3)
        self.assertEqual(sorted(r.index for r in fleet.runs), [0, 1, 2])
        self.assertEqual(len({r.microvm_id for r in fleet.runs}), 3)
        self.assertEqual(len({r.stdout.splitlines()[0] for r in fleet.runs}), 3, [r.stdout for r in fleet.runs])
        for r in fleet.runs:
            self.assertEqual(r.exit_code, 3)
            self.assertEqual(r.stdout.splitlines()[1], "out fleet")
            self.assertEqual(r.error_code, "ERR_EXEC_FAILED")
            self.assertFalse(r.ok)
        self.assertFalse(fleet.ok)
        self.assertEqual(fleet.leaked, [])
        assert fleet.cost is not None
        self.assertGreater(float(fleet.cost.total_usd), 0)

    def test_bounds_are_the_clis(self) -> None:
        # Catches: a count the CLI refuses (over MAX_FLEET_COUNT) launched
        # anyway from Python.
        with self.assertRaises(InvalidArgError):
            run_many("true", count=100000, local=True)
        # A launch option create refuses is refused here too, before any launch.
        with self.assertRaises(InvalidArgError):
            run_many("true", count=1, local=True, max_idle_sec=10)


if __name__ == "__main__":
    unittest.main()
