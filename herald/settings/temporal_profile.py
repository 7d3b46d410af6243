"""Temporal's own connection settings: the TEMPORAL_* variables and TOML profiles, read by Temporal.

Herald does not re-implement Temporal's environment configuration
(https://docs.temporal.io/develop/environment-configuration): it hands the TEMPORAL_* values it has
already checked (herald/settings/temporal.py, ``TemporalVariables``) to ``temporalio.envconfig``, so a profile written with
``temporal config set`` means to Herald what it means to the Temporal CLI. Herald's own
HERALD_TEMPORAL_* variables win over the result, one setting at a time (herald/settings/temporal.py).

Two differences from Temporal's defaults, both on purpose:

- The TOML file is read only when TEMPORAL_CONFIG_FILE or TEMPORAL_PROFILE asks for it, never
  implicitly from ~/.config/temporalio/temporal.toml: a developer's personal default profile (a
  Temporal Cloud API key, say) must not reach the local stack's worker, and the same variables
  must give the same answer in every process and every test, whatever the home directory holds.
- What Temporal's loader refuses is one line naming the variable, never its message: a TOML
  parse error quotes the offending line, which may be the one holding the API key.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import TypeAdapter, ValidationError
from temporalio.envconfig import ClientConfigProfile

from herald.settings.rules import FILE, TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TemporalAddress, TemporalNamespace
from herald.settings.variables import InvalidSetting

if TYPE_CHECKING:
    from herald.settings import TemporalVariables as Variables

# The file's values get the types the variables get.
_ADDRESS: TypeAdapter[str] = TypeAdapter(TemporalAddress)
_NAMESPACE: TypeAdapter[str] = TypeAdapter(TemporalNamespace)

# The TEMPORAL_* variables Temporal's loader reads (besides TEMPORAL_GRPC_META_*), each a field of TemporalVariables.
TEMPORAL_VARIABLES = (
    "TEMPORAL_CONFIG_FILE",
    "TEMPORAL_PROFILE",
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_API_KEY",
    "TEMPORAL_TLS",
    "TEMPORAL_TLS_SERVER_NAME",
    "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "TEMPORAL_TLS_SERVER_CA_CERT_DATA",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_CERT_DATA",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_CLIENT_KEY_DATA",
)


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    secret = getattr(value, "get_secret_value", None)
    return str(secret() if secret else value)


def temporal_variables(variables: Variables) -> dict[str, str]:
    """The TEMPORAL_* variables as Temporal's loader reads them, from their checked values."""
    given = {name: getattr(variables, name.lower()) for name in TEMPORAL_VARIABLES}
    env = {name: _as_text(value) for name, value in given.items() if value is not None}
    env.update(variables.temporal_grpc_meta)
    return env


def load_profile(variables: Variables) -> ClientConfigProfile:
    """The connection Temporal's own configuration describes; InvalidSetting names what it refuses."""
    reads_file = variables.temporal_config_file is not None or variables.temporal_profile is not None
    try:
        profile = ClientConfigProfile.load(disable_file=not reads_file, override_env_vars=temporal_variables(variables))
    except RuntimeError as error:  # temporalio's ConfigError (a RuntimeError): its text may quote the file
        raise _refused(str(error), variables) from None
    if reads_file:
        _check_file_values(profile, variables)
    return profile


def _refused(message: str, variables: Variables) -> InvalidSetting:
    if re.fullmatch(r"Profile '.*' not found", message, flags=re.DOTALL):
        return InvalidSetting(
            "TEMPORAL_PROFILE",
            "must name a profile of the Temporal config file "
            "(TEMPORAL_CONFIG_FILE, else Temporal's default temporal.toml)",
        )
    file = "TEMPORAL_CONFIG_FILE" if variables.temporal_config_file is not None else "TEMPORAL_PROFILE"
    where = re.search(r"at line (\d+), column (\d+)", message)
    if where:
        return InvalidSetting(file, f"the config file is not valid TOML (line {where[1]}, column {where[2]})")
    both = re.search(r"Cannot specify both (\w+) and (\w+)", message)
    if both:  # names of settings, never their values
        return InvalidSetting(file, f"the profile sets both {both[1]} and {both[2]}: one source per certificate or key")
    return InvalidSetting(file, "the config file cannot be read as Temporal client profiles")


def _check_file_values(profile: ClientConfigProfile, variables: Variables) -> None:
    """What the TOML file supplied gets the rules the variables get (a variable's value is checked already)."""
    file = "TEMPORAL_CONFIG_FILE" if variables.temporal_config_file is not None else "TEMPORAL_PROFILE"
    for setting, value, adapter, rule in (
        ("address", profile.address, _ADDRESS, TEMPORAL_ADDRESS),
        ("namespace", profile.namespace, _NAMESPACE, TEMPORAL_NAMESPACE),
    ):
        if value is not None and getattr(variables, f"temporal_{setting}") is None:
            try:
                adapter.validate_python(value)
            except ValidationError:
                raise InvalidSetting(file, f"the profile's {setting} {rule}") from None
    tls = profile.tls
    if tls is None:
        return
    for setting, source in (
        ("tls.server_ca_cert_path", tls.server_root_ca_cert),
        ("tls.client_cert_path", tls.client_cert),
        ("tls.client_key_path", tls.client_private_key),
    ):
        # A file named by the profile is read at connect time: a missing one is refused now instead.
        if isinstance(source, Path) and not source.is_file():
            raise InvalidSetting(file, f"the profile's {setting} {FILE}")
