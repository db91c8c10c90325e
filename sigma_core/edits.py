"""One process-wide count of the edits a recorded training step depends on (:mod:`sigma_core.replay`).

A recorded step replays its kernel calls on the buffers and layers it was recorded with. Whatever could
make that wrong (an attribute set on a layer, a network's parameters made anew, an optimiser's memory or
freeze filters replaced, a trainer's trainable set refreshed) calls :func:`bump`; recordings are looked
up under the count, so a step checks one integer instead of comparing all of that every time.
"""

count = 0


def bump():
    global count
    count += 1
