// Holds Pi after its final answer, as an extension that never lets go would in the field: print
// mode writes `agent_end`, then awaits every session_shutdown handler before it exits. A timer,
// not a bare pending promise: with nothing else pending node would exit anyway.
// (`rig calibrate --harness`'s silent_after_final check; harnesses/pi/adapter.py)
export default function (pi) {
  pi.on("session_shutdown", async () => {
    await new Promise((resolve) => setTimeout(resolve, 600000));
  });
}
