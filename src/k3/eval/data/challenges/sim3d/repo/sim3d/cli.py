"""python -m sim3d run SCENE [--steps N] [--dt DT] [--png FRAME] | random N --seed S -o SCENE"""

import argparse
import json
import sys

from sim3d import frame, scene


def summary(world) -> dict:
    """What a run prints: the time reached, bodies, energy and momentum."""
    return {"time": round(world.time, 9), "bodies": len(world), "energy": world.energy(),
            "momentum": world.momentum().tolist()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="sim3d")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="simulate a scene file")
    run.add_argument("scene")
    run.add_argument("--steps", type=int, default=100)
    run.add_argument("--dt", type=float, default=0.01)
    run.add_argument("--png", help="write the last frame here")
    rnd = sub.add_parser("random", help="write a random scene")
    rnd.add_argument("n", type=int)
    rnd.add_argument("--seed", type=int, default=0)
    rnd.add_argument("-o", "--output", required=True)
    args = p.parse_args(argv)
    try:
        if args.command == "random":
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(scene.dumps(scene.random_scene(args.n, args.seed)))
            return 0
        world = scene.load(args.scene)
    except (OSError, scene.SceneError) as e:
        print(f"sim3d: {e}", file=sys.stderr)
        return 2
    world.run(args.steps, args.dt)
    if args.png:
        frame.write_png(args.png, frame.render(world))
    print(json.dumps(summary(world)))
    return 0
