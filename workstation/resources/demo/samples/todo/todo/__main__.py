import argparse

from todo.store import TodoList


def main(argv=None):
    parser = argparse.ArgumentParser(prog="todo")
    parser.add_argument("--file", default="todo.json")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("add").add_argument("text")
    sub.add_parser("list")
    sub.add_parser("done").add_argument("number", type=int)
    args = parser.parse_args(argv)
    todos = TodoList(args.file)
    if args.command == "add":
        todos.add(args.text)
    elif args.command == "done":
        todos.complete(args.number)
    for line in todos.lines():
        print(line)


if __name__ == "__main__":
    main()
