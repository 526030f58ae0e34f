"""The tests the tasks must pass: `python3 -B check_calc.py add` or `... mul`."""
import sys

import calc

cases = {
    "add": lambda: calc.add(2, 3) == 5 or f"add(2, 3) returned {calc.add(2, 3)}, expected 5",
    "mul": lambda: calc.mul(2, 3) == 6 or f"mul(2, 3) returned {calc.mul(2, 3)}, expected 6",
}
outcome = cases[sys.argv[1]]()
if outcome is not True:
    print(f"FAILED: {outcome}")
    sys.exit(1)
print("passed")
