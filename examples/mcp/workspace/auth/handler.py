"""The auth module the example plan refactors."""


def check_password(user, password):
    return user.password == password


def login(user, password):
    if check_password(user, password):
        return {"ok": True, "user": user.name}
    return {"ok": False}
