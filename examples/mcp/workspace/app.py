from auth.handler import login


def handle(request):
    return login(request.user, request.password)
