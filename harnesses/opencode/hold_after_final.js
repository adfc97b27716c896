// Holds OpenCode after its final answer, as a plugin that never lets go would in the field:
// `opencode run` writes its last step_finish, then awaits each plugin's dispose() before
// process.exit() (an `event` hook is called but not awaited: it could not hold it).
// (`rig calibrate --harness`'s silent_after_final check; harnesses/opencode/adapter.py)
export const HoldAfterFinal = async () => ({
  dispose: async () => {
    await new Promise((resolve) => setTimeout(resolve, 600000));
  },
});
