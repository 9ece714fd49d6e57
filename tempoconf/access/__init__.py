"""Who may do what: the access policy (TEMPOCONF_ACCESS_FILE), the identities it names (static
tokens, fleet clients, OpenID Connect bearer tokens) and the roles they hold per namespace."""
