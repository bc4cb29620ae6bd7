import calc

assert calc.add(2, 3) == 5, "add is wrong"
assert calc.mean([1, 2, 3]) == 2
print("all good")
