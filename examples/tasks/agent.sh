#!/bin/sh
# A stand-in for a coding agent (claude -p, codex exec, aider --message): it gets the task's
# id (the breakdown's, or plan.yaml's) and its feedback, and edits the files of the worktree
# it runs in. Its first try at `add` is wrong on purpose; the feedback from the failed check
# tells it what to fix.
task="$1"
feedback="$2"
case "$task" in
  L1-add|L1-001)
    case "$feedback" in
      *"expected 5"*) sed -i '/^def add/{n;s/.*/    return a + b/}' calc.py ;;
      *) sed -i '/^def add/{n;s/.*/    return a - b/}' calc.py ;;
    esac ;;
  L2-mul|L2-001)
    sed -i '/^def mul/{n;s/.*/    return a * b/}' calc.py ;;
esac
