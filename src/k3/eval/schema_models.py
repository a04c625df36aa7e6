"""Pydantic v2 models as people write them for structured outputs and tool arguments: the `pydantic`
subset of the schema corpus (schema_corpus.py). Each model stands for a common shape; together they
reach the keywords `model_json_schema()` writes (uniqueItems, anyOf/null, discriminated oneOf,
recursive `$ref`s, constrained numbers and strings, formats, enums, additionalProperties maps, tuples)."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, conint, constr

# An e-mail string as pydantic's EmailStr writes it (that type needs the email-validator package at import).
EmailStr = Annotated[str, Field(json_schema_extra={"format": "email"})]


class Colour(str, enum.Enum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class Tagged(BaseModel):
    title: str
    tags: set[str]


class RestaurantSearch(BaseModel):
    location: str
    cuisines: set[Literal["thai", "italian", "indian", "mexican"]] = Field(default_factory=set)
    price_levels: frozenset[conint(ge=1, le=4)] = frozenset()
    open_now: bool = False


class Address(BaseModel):
    street: str
    city: str
    postcode: constr(pattern=r"^\d{5}$")
    country: str = "DE"


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=40)
    age: int = Field(ge=0, le=150)
    email: EmailStr | None = None
    home: Address
    work: Address | None = None


class Money(BaseModel):
    amount: Decimal
    currency: Literal["EUR", "USD", "GBP"]


class Invoice(BaseModel):
    number: str
    issued: dt.date
    due: dt.datetime
    lines: list[Money] = Field(min_length=1)
    id: uuid.UUID


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = 9


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True


class Pet(BaseModel):
    animal: Annotated[Union[Cat, Dog], Field(discriminator="kind")]


class TreeNode(BaseModel):
    label: str
    children: list[TreeNode] = []


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    colour: Colour
    limits: dict[str, int]
    flags: dict[str, bool] = {}


class Point(BaseModel):
    xy: tuple[float, float]
    label: str | None = None


class Polygon(BaseModel):
    points: list[Point] = Field(min_length=3, max_length=12)
    closed: bool = True


class Meeting(BaseModel):
    title: str
    start: dt.datetime
    duration: dt.timedelta
    attendees: list[EmailStr]
    room: int | str | None = None


class Link(BaseModel):
    url: HttpUrl
    rel: Literal["next", "prev", "self"]


class Page(BaseModel):
    items: list[dict[str, str | int | float | bool | None]]
    links: list[Link]
    total: int = Field(ge=0)


class Rating(BaseModel):
    stars: float = Field(ge=0, le=5, multiple_of=0.5)
    review: str | None = Field(None, max_length=280)


class Classification(BaseModel):
    label: Literal["positive", "negative", "neutral"]
    confidence: float = Field(ge=0, le=1)
    reasons: list[str] = Field(max_length=5)


class Step(BaseModel):
    explanation: str
    output: str


class MathReasoning(BaseModel):
    steps: list[Step]
    final_answer: str


class Entity(BaseModel):
    text: str
    type: Literal["PERSON", "ORG", "PLACE", "DATE"]
    span: tuple[int, int]


class Extraction(BaseModel):
    entities: list[Entity]
    language: str = Field(pattern=r"^[a-z]{2}$")


class FileEdit(BaseModel):
    path: str
    kind: Literal["create", "replace", "delete"]
    content: str | None = None
    lines: set[int] | None = None


class Patch(BaseModel):
    edits: list[FileEdit] = Field(min_length=1)
    message: str = Field(max_length=72)


class Expr(BaseModel):
    op: Literal["+", "-", "*", "/"]
    left: Union[float, Expr]
    right: Union[float, Expr]


class Query(BaseModel):
    table: str
    columns: list[str] = ["*"]
    where: dict[str, Union[str, int, float, list[str]]] = {}
    limit: int | None = Field(None, gt=0, le=1000)
    order: Literal["asc", "desc"] = "asc"


class Release(BaseModel):
    version: constr(pattern=r"^\d+\.\d+\.\d+$")
    date: dt.date
    notes: list[str]
    yanked: bool = False


class Inventory(BaseModel):
    items: dict[str, conint(ge=0)]
    warehouse: Literal["north", "south"]
    checked: dt.time | None = None


class Survey(BaseModel):
    answers: list[Union[int, str, list[int]]]
    respondent: uuid.UUID | None = None


class UserProfile(BaseModel):
    username: constr(min_length=3, max_length=16, pattern=r"^[a-z0-9_]+$")
    roles: set[Literal["admin", "editor", "viewer"]]
    preferences: Settings | None = None


MODELS = [Tagged, RestaurantSearch, Person, Invoice, Pet, TreeNode, Settings, Polygon, Meeting, Page, Rating,
          Classification, MathReasoning, Extraction, Patch, Expr, Query, Release, Inventory, Survey, UserProfile]
