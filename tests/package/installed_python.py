"""The installed Python package, as a user's interpreter finds it: PREFIX/lib/python3/dist-packages
on the path, the library found three folders up (no MGM_C_LIBRARY), or where MGM_C_LIBRARY says.
Usage: installed_python.py PREFIX BUILD_TREE_LIBRARY"""
import os
import subprocess
import sys

prefix, built = (os.path.abspath(a) for a in sys.argv[1:3])
site = os.path.join(prefix, "lib", "python3", "dist-packages")
probe = (
    "import multigpumem as m, os\n"
    "p = m.alloc(1 << 20, 0)\n"
    "assert p, m._lib.last_error()\n"
    "m.free(p, 1 << 20, 0)\n"
    "print(os.path.realpath(m.library_path()))\n"
    "print(os.path.realpath(m.__file__))\n"
)


def run(extra):
    env = {k: v for k, v in os.environ.items() if k not in ("MGM_C_LIBRARY", "PYTHONPATH")}
    env.update({"PYTHONPATH": site, "MGM_C_SIM": "2x8GiB"})
    env.update(extra)
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd="/", timeout=60)
    if r.returncode != 0:
        sys.exit("python failed (%s): %s%s" % (extra, r.stdout, r.stderr))
    return r.stdout.split("\n")[:2]


lib, module = run({})
want_lib = os.path.realpath(os.path.join(prefix, "lib", "libmultigpumem_c.so.1"))
if lib != want_lib:
    sys.exit("the installed package loaded %s, not the installed %s" % (lib, want_lib))
if not module.startswith(os.path.realpath(site) + os.sep):
    sys.exit("imported %s, not the installed package under %s" % (module, site))
lib, _ = run({"MGM_C_LIBRARY": built})
if lib != os.path.realpath(built):
    sys.exit("MGM_C_LIBRARY=%s, but %s was loaded" % (built, lib))
print("installed package loads %s; with MGM_C_LIBRARY, %s" % (want_lib, lib))
