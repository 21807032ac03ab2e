"""Copying what one llama-server slot holds to others: the slot actions `save` and `restore`
(`POST /slots/{id}?action=...`), which llama-server offers when started with
`--slot-save-path DIR`.

A request's N samples, or a pair and order's reflections, share a prompt. llama-server's own
copy of a prompt (`n: N`) records no tokens in the slots it copies to, so later requests (the
samples' forced verdicts, the reflections) cannot find their prefix there. A slot restored from
a saved one holds the saved tokens and records them, so every slot of a group can then serve
its requests from the shared prefix, side by side (engine/server.py).

rmjudge uses them where a copy is kept until it is used (`slot_copies_kept`, asked once when
the run starts). The file of slot K is `rmjudge-TAG-slot-K.bin` in the server's folder (TAG
from the server's URL and model, so two servers sharing a folder never read each other's),
written again at every copy from that slot: at most one file per slot and server, whatever the
number of runs. A save or restore the server refuses or does not answer switches the copies
off for the run; the requests still run, each evaluating the part of its prompt its slot
lacks. Slot actions are not retried (llama-server answers a save it cannot write with HTTP
500): a failed one costs the copies, never the run, nor the retries' waits.
"""

from __future__ import annotations

import asyncio
import hashlib

from rmjudge.servers import responses as wire
from rmjudge.servers.bodies import RequestBodies
from rmjudge.servers.client import HTTPStatus, ServerClient, Unreachable

# the probe's prompts: short, and unlike any judge prompt
PROBE_TEXT = "Counting sheep: " + " ".join(str(i) for i in range(1, 41))
OTHER_TEXT = "Counting goats: " + " ".join(str(i) for i in range(1, 41))


def slot_file(tag: str, slot: int) -> str:
    """The file of `slot` on the server `tag` names (one per server: two servers that share
    a folder never read each other's)."""
    return f"rmjudge-{tag}-slot-{slot}.bin"


def server_tag(url: str, model: str) -> str:
    """A short name for one server and model, for its copies' files."""
    return hashlib.blake2b(f"{url}\n{model}".encode(), digest_size=4).hexdigest()


async def slot_copies_kept(client: ServerClient, bodies: RequestBodies, tag: str) -> bool:
    """Whether a copy made with the server's slot actions is kept until it is used: the
    probe's prompt evaluated on slot 0 and copied to slot 1, another prompt run on slot 0,
    then the probe's prompt on slot 1 must find most of itself cached. False without slot
    actions (llama-server without `--slot-save-path` answers 501), where idle slots are emptied
    between requests (llama-server with `--kv-unified` moves them to its prompt cache: every
    copied slot would evaluate its prompt again), and where the probe gets no answer."""
    async def ask(text: str, slot: int) -> dict:
        body = bodies.completion(text, 1, 0.0, 1.0, 0, (), None)
        body["id_slot"] = slot
        return await client.post("/completions", body)

    try:
        total = wire.usage(await ask(PROBE_TEXT, 0))[0]
        if not await copy_slot(client, tag, 0, [1]):
            return False
        await ask(OTHER_TEXT, 0)
        cached = wire.cached_tokens(await ask(PROBE_TEXT, 1))
    except (HTTPStatus, Unreachable, wire.ProtocolError):
        return False  # a server that is gone fails the run's first request with its message
    return bool(total) and cached is not None and 2 * cached >= total  # type: ignore[operator]


async def save_slot(client: ServerClient, tag: str, slot: int) -> bool:
    """What `slot` holds, written to its file; False when the server refuses or does not
    answer, or writes nothing."""
    try:
        saved = await client.request("POST", f"{client.root}/slots/{slot}?action=save",
                                     {"filename": slot_file(tag, slot)}, retry=False)
    except (HTTPStatus, Unreachable):
        return False
    return saved.get("n_written") != 0  # llama-server answers 200 when it could not write


async def restore_slot(client: ServerClient, tag: str, source: int, target: int) -> bool:
    """Slot `target` made to hold what `save_slot` wrote from `source`; False when the server
    refuses or does not answer."""
    try:
        await client.request("POST", f"{client.root}/slots/{target}?action=restore",
                             {"filename": slot_file(tag, source)}, retry=False)
    except (HTTPStatus, Unreachable):
        return False
    return True


async def copy_slot(client: ServerClient, tag: str, source: int, targets: list[int]) -> bool:
    """What slot `source` holds, copied to each of `targets` (saved once, restored into each
    side by side); False when a save or a restore fails."""
    if not await save_slot(client, tag, source):
        return False
    done = await asyncio.gather(*(restore_slot(client, tag, source, t) for t in targets))
    return all(done)
