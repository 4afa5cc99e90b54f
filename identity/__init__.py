"""Single sign-on with OpenID Connect: the provider's endpoints, the sign-in backend, users and roles from claims."""
