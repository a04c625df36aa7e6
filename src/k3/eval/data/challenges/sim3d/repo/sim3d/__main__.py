import sys

from sim3d.cli import main

sys.exit(main())
