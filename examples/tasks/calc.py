def add(a, b):
    raise NotImplementedError


def mul(a, b):
    raise NotImplementedError
