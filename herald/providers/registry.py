"""The providers one worker has, by name, and which names serve which channel (the first: its built-in route).

A route in the send policy names providers (``herald.core.routes``); an attempt's lookups and cancels
go to the provider its row names. So the activities find providers by name, never as "the channel's
provider"; the channel's first provider is what a policy without routes means, and what an attempt
recorded before providers were named went to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from herald.core.message import Channel
from herald.providers.port import Provider


class Providers(Mapping[str, Provider]):
    """Providers by name (``Provider.name``), each serving one channel."""

    def __init__(self, channels: Mapping[Channel, Sequence[Provider]]) -> None:
        self._by_name: dict[str, Provider] = {}
        self._channels: dict[Channel, list[str]] = {}
        self._channel_of: dict[str, Channel] = {}
        for channel, providers in channels.items():
            for provider in providers:
                if provider.name in self._by_name:
                    raise ValueError(f"providers: the name {provider.name!r} is taken twice; a route names one provider")
                self._by_name[provider.name] = provider
                self._channel_of[provider.name] = channel
                self._channels.setdefault(channel, []).append(provider.name)

    @classmethod
    def one_per_channel(cls, providers: Mapping[Channel, Provider]) -> Providers:
        """One provider per channel (a test's, or a worker built before routes)."""
        return cls({channel: [provider] for channel, provider in providers.items()})

    def __getitem__(self, name: str) -> Provider:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def serving(self, channel: Channel) -> list[str]:
        """The names that serve `channel`, its built-in route first."""
        return list(self._channels.get(channel, []))

    def default(self, channel: Channel) -> Provider | None:
        """The channel's first provider: the built-in route, and the one an unnamed attempt went to."""
        names = self._channels.get(channel)
        return self._by_name[names[0]] if names else None

    def for_attempt(self, channel: Channel, name: str | None) -> Provider | None:
        """The provider an attempt's row names (it must serve the attempt's channel); the channel's
        default when the row names none (recorded before providers were named)."""
        if name is None:
            return self.default(channel)
        return self._by_name[name] if self._channel_of.get(name) is channel else None

    def wrapped(self, wrap: Callable[[Provider], Provider]) -> Providers:
        """The same providers, each wrapped (a fault test's crashing provider), names and order kept."""
        return Providers({channel: [wrap(self._by_name[n]) for n in names] for channel, names in self._channels.items()})
