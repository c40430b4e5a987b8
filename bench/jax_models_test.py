"""Checks jax_models.collective_bytes on small HLO texts written the way
XLA prints them: a collective in a while body counts once per trip (a
scanned model's per-layer all-reduce), through nested loops and calls, and
one outside any loop once. Run by ctest (label bench_smoke)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax_models  # noqa: E402

HLO = """HloModule jit_train

%add (a: f32[], b: f32[]) -> f32[] {
  ROOT %s = f32[] add(%a, %b)
}

%inner_body (p: (s32[], f32[10])) -> (s32[], f32[10]) {
  %x = f32[10]{0} get-tuple-element(%p), index=1
  %ar.1 = f32[10]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=%add
  ROOT %t = (s32[], f32[10]) tuple(%i, %ar.1)
}

%outer_body (p: (s32[], f32[10])) -> (s32[], f32[10]) {
  %w = (s32[], f32[10]) while(%p), condition=%cond, body=%inner_body, backend_config={"known_trip_count":{"n":"2"}}
  ROOT %c = (s32[], f32[10]) call(%w), to_apply=%callee, calls=%callee
}

%callee (p: (s32[], f32[10])) -> (s32[], f32[10]) {
  %y = f32[8]{0} get-tuple-element(%p), index=1
  %ag.1 = f32[32]{0} all-gather(%y), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %r = (s32[], f32[10]) tuple(%i, %y)
}

ENTRY %main (a: f32[10]) -> f32[10] {
  %loop = (s32[], f32[10]) while(%init), condition=%cond, body=%outer_body, backend_config={"known_init_step":{"init":"0","step":"1"},"known_trip_count":{"n":"3"}}
  %ar.2 = f32[10]{0} all-reduce(%a), channel_id=3, replica_groups={{0,1,2,3}}, to_apply=%add
  ROOT %out = f32[10]{0} get-tuple-element(%loop), index=1
}
"""


class CollectiveBytes(unittest.TestCase):
    def test_loops_multiply_and_calls_carry_their_callers_count(self):
        kinds = jax_models.collective_bytes(HLO, 4)
        # all-reduce of 40 bytes over 4 devices sends 2*3/4*40 = 60 bytes:
        # 3*2 = 6 times in the nested loops, once outside.
        self.assertEqual(kinds["all-reduce"], {"calls": 7, "bytes": 7 * 60.0})
        # all-gather of a 128-byte result sends 3/4 of it, in the called
        # computation of the outer body: 3 times.
        self.assertEqual(kinds["all-gather"], {"calls": 3, "bytes": 3 * 96.0})

    def test_a_loop_without_a_known_trip_count_counts_once(self):
        text = HLO.replace(',"known_trip_count":{"n":"3"}', "")
        self.assertEqual(jax_models.collective_bytes(text, 4)["all-reduce"]["calls"], 1 * 2 + 1)


if __name__ == "__main__":
    unittest.main()
