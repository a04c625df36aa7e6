"""Reference solutions to the built-in agent tasks, keyed by a phrase of each task's prompt."""

SOLUTIONS = {
    "`mean` in stats_utils.py": {"stats_utils.py": "def mean(values):\n    return sum(values) / len(values)\n"},
    "slugify(text)": {"slug.py": "import re\n\ndef slugify(text):\n    return re.sub(r'[^a-z0-9]+', '-', text.lower()).strip('-')\n"},
    "notes.txt": {"counts.json": '{"the": 3, "cat": 2, "sat": 2, "dog": 2, "a": 2, "end": 1}'},
    "fizzbuzz.txt": {"fizzbuzz.txt": "\n".join("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0
                                               else str(i) for i in range(1, 31)) + "\n"},
    "is_palindrome(s)": {"text_tools.py": "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n"},
    "sales.csv": {"totals.json": '{"books": 20.0, "games": 40.0, "food": 3.25}'},
    "to_roman(n)": {"roman.py": "def to_roman(n):\n    out = ''\n    for v, s in [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'),"
                    " (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]:\n        while n >= v:\n"
                    "            out += s\n            n -= v\n    return out\n"},
    "paginate(items, page, size)": {"pages.py": "def paginate(items, page, size):\n    start = (page - 1) * size\n    return items[start:start + size]\n"},
    "merge(intervals)": {"intervals.py": "def merge(intervals):\n    out = []\n    for s, e in sorted(intervals):\n"
                         "        if out and s <= out[-1][1]:\n            out[-1][1] = max(out[-1][1], e)\n        else:\n"
                         "            out.append([s, e])\n    return out\n"},
    "area_calc": {"geometry.py": "def rectangle_area(w, h):\n    return w * h\n",
                  "report.py": "from geometry import rectangle_area\n\n\ndef describe(w, h):\n    return f'area={rectangle_area(w, h)}'\n"},
    "class `Stack`": {"stack.py": "class Stack:\n    def __init__(self):\n        self._xs = []\n\n    def push(self, x):\n"
                      "        self._xs.append(x)\n\n    def pop(self):\n        if not self._xs:\n            raise IndexError('empty')\n"
                      "        return self._xs.pop()\n\n    def peek(self):\n        if not self._xs:\n            raise IndexError('empty')\n"
                      "        return self._xs[-1]\n\n    def __len__(self):\n        return len(self._xs)\n"},
}
