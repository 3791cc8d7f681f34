"""``@tool`` reads each parameter's description from the docstring's Args section."""

from drivetrain import tool


def test_parameter_descriptions_come_from_the_args_section():
    @tool
    def move(src: str, dest: str, overwrite: bool = False) -> str:
        """Move a file inside the workspace.

        Args:
            src: the file to move,
                relative to the workspace.
            dest (str): where it goes.
            overwrite: replace ``dest`` if it exists.

        Returns:
            what was done.
        """
        return f"{src} -> {dest}"

    assert move.description == "Move a file inside the workspace."
    props = move.input_schema["properties"]
    assert props["src"]["description"] == "the file to move, relative to the workspace."
    assert props["dest"]["description"] == "where it goes."
    assert (
        props["overwrite"]["description"] == "replace ``dest`` if it exists." and props["overwrite"]["default"] is False
    )
    assert move.input_schema["required"] == ["src", "dest"]


def test_a_docstring_without_sections_is_the_whole_description_and_no_parameter_is_described():
    @tool
    def shout(text: str) -> str:
        """Upper-case the text: src: is not a parameter here."""
        return text.upper()

    assert shout.description == "Upper-case the text: src: is not a parameter here."
    assert "description" not in shout.input_schema["properties"]["text"]
