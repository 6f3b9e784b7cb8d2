"""HTTP for every role: serving (the browser guard, capped requests, JSON answers, auth) and client factories."""
